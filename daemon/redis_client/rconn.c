/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rconn.c - one Redis connection over a libevent bufferevent (see rconn.h).
 *
 * Owns: the bufferevent, the reader and the FIFO ring of (kind, tag) of
 * the commands awaiting a reply. Output goes into the bufferevent's output
 * buffer, which libevent writes when the loop next finds the socket
 * writable: everything queued in one pass leaves in one write.
 *
 * Every TCP connection gets TCP keepalive (RCONN_KA_*): a connection that
 * waits for nothing (idle in a pool, or subscribed to a sentinel) would
 * otherwise never learn that its peer's host is gone.
 *
 * Re-entrancy: an owner callback may call rconn_free. Inside our own
 * bufferevent callbacks that only marks the connection (in_cb counts the
 * depth) and the free happens when the outermost callback returns, so no
 * code here touches a freed struct.
 */

#include "rconn.h"

#include "resp.h"
#include "tls.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#define RCONN_MAX_IO   (256 * 1024) /* bytes one read or one write may move */
#define RCONN_KA_IDLE  15	    /* s idle before the first keepalive probe */
#define RCONN_KA_INTVL 5	    /* s between probes */
#define RCONN_KA_CNT   3	    /* unanswered probes before the kernel gives up */

struct pend {
	int kind;
	void *tag;
};

struct rconn {
	struct bufferevent *bev;
	struct resp_reader *rd;
	const struct rconn_ops *ops;
	void *owner;
	struct pend *ring;
	size_t cap, head, n; /* ring of n entries from head */
	int in_cb;
	bool free_pending;
	bool closed;   /* on_event(!up) delivered: deliver nothing more */
	bool starting; /* inside rconn_new: the owner does not know us yet */
	bool tcp;      /* not a Unix socket: keepalive on connect */
	char start_err[128];
};

/* Room for one more entry; -1 on OOM (nothing changed). */
static int ring_reserve(struct rconn *c)
{
	if (c->n == c->cap) {
		size_t ncap = c->cap ? c->cap * 2 : 64;
		struct pend *nr = malloc(ncap * sizeof(*nr));
		if (nr == NULL)
			return -1;
		for (size_t i = 0; i < c->n; i++)
			nr[i] = c->ring[(c->head + i) % c->cap];
		free(c->ring);
		c->ring = nr;
		c->cap = ncap;
		c->head = 0;
	}
	return 0;
}

static void ring_push(struct rconn *c, int kind, void *tag)
{
	c->ring[(c->head + c->n) % c->cap] = (struct pend){ kind, tag };
	c->n++;
}

static bool ring_pop(struct rconn *c, struct pend *out)
{
	if (c->n == 0)
		return false;
	*out = c->ring[c->head];
	c->head = (c->head + 1) % c->cap;
	c->n--;
	return true;
}

static void rconn_destroy(struct rconn *c)
{
	struct pend p;

	if (c->bev != NULL)
		bufferevent_free(c->bev);
	c->bev = NULL;
	while (ring_pop(c, &p))
		c->ops->on_reply(c->owner, p.kind, p.tag, NULL);
	resp_reader_free(c->rd);
	free(c->ring);
	free(c);
}

/* Leave a callback: free now if the owner asked for it inside. */
static void cb_leave(struct rconn *c)
{
	if (--c->in_cb == 0 && c->free_pending)
		rconn_destroy(c);
}

static void rconn_fail(struct rconn *c, const char *why)
{
	if (c->starting) {
		snprintf(c->start_err, sizeof(c->start_err), "%s", why);
		return;
	}
	if (c->closed)
		return;
	c->closed = true;
	if (c->bev != NULL)
		bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	c->ops->on_event(c->owner, false, why);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct rconn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v[16];
	int nv;

	c->in_cb++;
	while (!c->free_pending && !c->closed && evbuffer_get_length(in) > 0) {
		size_t got = 0;
		nv = evbuffer_peek(in, -1, NULL, v, 16);
		if (nv > 16)
			nv = 16;
		for (int i = 0; i < nv; i++) {
			if (resp_feed(c->rd, v[i].iov_base, v[i].iov_len) < 0) {
				rconn_fail(c, "out of memory");
				goto out;
			}
			got += v[i].iov_len;
		}
		if (evbuffer_drain(in, got) != 0) {
			rconn_fail(c, "evbuffer_drain failed");
			goto out;
		}
		for (;;) {
			struct rval *r = NULL;
			struct pend p;
			int k = resp_next(c->rd, &r);
			if (k == 0)
				break;
			if (k < 0) {
				char why[200];
				snprintf(why, sizeof(why), "protocol error in reply: %s",
					 resp_error(c->rd));
				rconn_fail(c, why);
				goto out;
			}
			if (ring_pop(c, &p))
				c->ops->on_reply(c->owner, p.kind, p.tag, r);
			else
				c->ops->on_push(c->owner, r);
			if (c->free_pending || c->closed)
				goto out;
		}
	}
out:
	cb_leave(c);
}

/* Keepalive on a connected TCP socket; best effort (the loop works without). */
static void keepalive_on(evutil_socket_t fd)
{
	int on = 1, idle = RCONN_KA_IDLE, intvl = RCONN_KA_INTVL, cnt = RCONN_KA_CNT;

	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) != 0)
		return;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct rconn *c = arg;
	char buf[256];

	c->in_cb++;
	if (what & BEV_EVENT_CONNECTED) {
		if (c->tcp)
			keepalive_on(bufferevent_getfd(bev));
		if (!c->closed)
			c->ops->on_event(c->owner, true, NULL);
	} else if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
		int e = EVUTIL_SOCKET_ERROR();
		if (tls_error(bev, buf, sizeof(buf)))
			; /* the TLS reason, verification first */
		else if (what & BEV_EVENT_EOF)
			snprintf(buf, sizeof(buf), "closed by server");
		else if (e != 0)
			snprintf(buf, sizeof(buf), "%s", evutil_socket_error_to_string(e));
		else
			snprintf(buf, sizeof(buf), "connection error");
		rconn_fail(c, buf);
	}
	cb_leave(c);
}

struct rconn *rconn_new(struct event_base *base, const char *host, int port, const char *path,
			struct tls_ctx *tls, const struct rconn_ops *ops, void *owner, char *err,
			size_t errlen)
{
	struct rconn *c = calloc(1, sizeof(*c));
	struct evutil_addrinfo hints, *ai = NULL;
	const char *errpos = "calloc";
	char portstr[16];
	int rc;

	errno = 0;
	if (c == NULL)
		goto fail;
	c->starting = true;
	c->tcp = path == NULL;
	c->ops = ops;
	c->owner = owner;
	errpos = "reader";
	c->rd = resp_reader_new();
	if (c->rd == NULL)
		goto fail;
	errpos = "bufferevent";
	if (tls != NULL && path == NULL)
		c->bev = tls_bufferevent_new(base, tls, host);
	else
		c->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (c->bev == NULL)
		goto fail;
	bufferevent_setcb(c->bev, read_cb, NULL, event_cb, c);
	/* libevent's 16 KiB default would split a loop pass's pipeline into
	 * several writes, and a batch of replies into several reads. */
	if (bufferevent_set_max_single_write(c->bev, RCONN_MAX_IO) != 0 ||
	    bufferevent_set_max_single_read(c->bev, RCONN_MAX_IO) != 0)
		goto fail;
	if (bufferevent_enable(c->bev, EV_READ | EV_WRITE) != 0)
		goto fail;
	errpos = "connect";
	if (path != NULL) {
		struct sockaddr_un sun;
		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		if (strlen(path) >= sizeof(sun.sun_path))
			goto fail;
		memcpy(sun.sun_path, path, strlen(path) + 1);
		rc = bufferevent_socket_connect(c->bev, (struct sockaddr *)&sun, sizeof(sun));
	} else {
		/* Resolved here, blocking, as hiredis did: names are rare and local. */
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		snprintf(portstr, sizeof(portstr), "%d", port);
		errpos = "getaddrinfo";
		rc = evutil_getaddrinfo(host, portstr, &hints, &ai);
		if (rc != 0 || ai == NULL) {
			snprintf(c->start_err, sizeof(c->start_err), "%s", evutil_gai_strerror(rc));
			goto fail;
		}
		errpos = "connect";
		rc = bufferevent_socket_connect(c->bev, ai->ai_addr, (int)ai->ai_addrlen);
		evutil_freeaddrinfo(ai);
	}
	if (rc != 0 || c->start_err[0] != '\0')
		goto fail;
	c->starting = false;
	return c;
fail:
	snprintf(err, errlen, "%s failed: %s", errpos,
		 c != NULL && c->start_err[0] ? c->start_err
		 : errno != 0		      ? strerror(errno)
					      : "out of memory");
	if (c != NULL) {
		if (c->bev != NULL)
			bufferevent_free(c->bev);
		resp_reader_free(c->rd);
		free(c);
	}
	return NULL;
}

int rconn_send(struct rconn *c, const char *cmd, size_t len, int kind, void *tag)
{
	if (c->closed || c->free_pending || ring_reserve(c) != 0)
		return -1;
	if (evbuffer_add(bufferevent_get_output(c->bev), cmd, len) != 0)
		return -1;
	ring_push(c, kind, tag);
	return 0;
}

size_t rconn_pending(const struct rconn *c)
{
	return c->n;
}

void rconn_free(struct rconn *c)
{
	if (c == NULL || c->free_pending)
		return;
	c->closed = true;
	if (c->in_cb > 0) {
		c->free_pending = true;
		if (c->bev != NULL)
			bufferevent_disable(c->bev, EV_READ | EV_WRITE);
		return;
	}
	rconn_destroy(c);
}
