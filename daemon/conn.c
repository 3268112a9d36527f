/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conn.c - one client connection: bytes in, lines out.
 *
 * Owns: struct conn and its bufferevent. Frames input into lines (LF, a
 * trailing CR tolerated) with a hard cap of max_line checked before the
 * newline arrives; hands each line to ops.c; writes replies; caps the
 * output a client leaves unread. On close it cancels the connection's
 * waiters (they book nothing) and releases its leases that are not detached.
 */

#include "admitd.h"

#include "log.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

/* A client that leaves this much of our output unread is dropped. */
#define CONN_MAX_OUTPUT (8 * 1024 * 1024)

static void conn_close_after_flush(struct conn *c);

static void conn_free(struct conn *c)
{
	struct admitd *ad = c->ad;

	c->closing = true; /* what follows must not schedule another close */
	while (!TAILQ_EMPTY(&c->waiters))
		waitq_cancel(TAILQ_FIRST(&c->waiters));
	lease_conn_closed(c);
	TAILQ_REMOVE(&ad->conns, c, link);
	ad->nconns--;
	bufferevent_free(c->bev);
	event_free(c->close_ev);
	free(c);
	if (ad->shutting_down && ad->nconns == 0 && ad->exit_ev != NULL)
		event_active(ad->exit_ev, EV_TIMEOUT, 0);
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	if (c->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		conn_free(c);
}

/*
 * Did the peer close its end entirely (not just its write side)? A Unix
 * stream socket whose peer is gone polls POLLHUP; one whose peer only
 * shut down writing (`echo ... | socat`) still takes our replies.
 */
static bool conn_peer_gone(struct conn *c)
{
	struct pollfd pfd = { .fd = bufferevent_getfd(c->bev), .events = POLLOUT };

	return poll(&pfd, 1, 0) < 0 || (pfd.revents & (POLLHUP | POLLERR)) != 0;
}

/*
 * EOF: a client that is gone gets nothing more (its waiters book nothing,
 * its leases are released). One that only finished sending is still owed
 * the replies to its waiting acquires: it is closed when the last is sent.
 */
static void conn_event_cb(struct bufferevent *bev UNUSED, short what, void *arg)
{
	struct conn *c = arg;

	if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR) && !c->closing &&
	    (!TAILQ_EMPTY(&c->waiters) ||
	     evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) &&
	    !conn_peer_gone(c)) {
		c->half_closed = true;
		bufferevent_disable(c->bev, EV_READ);
		/* Replies already queued are flushed; waiters close it when done. */
		conn_waiter_done(c);
		return;
	}
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		conn_free(c);
}

void conn_sweep(struct admitd *ad)
{
	struct conn *c, *nx;

	/* A half-closed client that has since gone entirely gives its waiters up
	 * within a sweep period, not only when a reply fails to reach it. */
	for (c = TAILQ_FIRST(&ad->conns); c != NULL; c = nx) {
		nx = TAILQ_NEXT(c, link);
		if (c->half_closed && !c->closing && conn_peer_gone(c))
			conn_free(c);
	}
}

void conn_waiter_done(struct conn *c)
{
	if (c->half_closed && !c->closing && TAILQ_EMPTY(&c->waiters))
		conn_close_after_flush(c);
}

static void conn_close_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	conn_free(arg);
}

/*
 * Stop reading, flush what is queued, then close. Never frees at once: the
 * caller may be deep in this connection's read loop, so the free runs from
 * the loop (the write callback, or close_ev when nothing is left to write).
 */
static void conn_close_after_flush(struct conn *c)
{
	c->closing = true;
	bufferevent_disable(c->bev, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		event_active(c->close_ev, EV_TIMEOUT, 0);
}

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t max_line = (size_t)c->ad->conf->max_line;

	while (!c->closing) {
		struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, NULL, EVBUFFER_EOL_LF);
		size_t len;
		char *line;

		if (eol.pos < 0) {
			if (evbuffer_get_length(in) > max_line)
				goto too_long;
			return;
		}
		len = (size_t)eol.pos;
		if (len > max_line)
			goto too_long;
		line = malloc(len + 1);
		if (line == NULL) {
			log_ratelimited(LOG_SLOT_ACCEPT, 1000, "out of memory reading a line",
					NULL);
			conn_close_after_flush(c);
			return;
		}
		evbuffer_remove(in, line, len + 1);
		if (len > 0 && line[len - 1] == '\r')
			len--;
		line[len] = '\0';
		if (len > 0)
			ops_dispatch(c, line, len);
		free(line);
	}
	return;
too_long:
	conn_send_reply(
	    c, preply_error(NULL, ADMIT_E_LINE_TOO_LONG, "request line longer than max_line"));
	evbuffer_drain(in, evbuffer_get_length(in));
	conn_close_after_flush(c);
}

void conn_new(struct admitd *ad, int fd)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		evutil_closesocket(fd);
		return;
	}
	c->bev = bufferevent_socket_new(ad->base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->close_ev = evtimer_new(ad->base, conn_close_cb, c);
	if (c->bev == NULL || c->close_ev == NULL) {
		if (c->bev != NULL)
			bufferevent_free(c->bev);
		else
			evutil_closesocket(fd);
		if (c->close_ev != NULL)
			event_free(c->close_ev);
		free(c);
		return;
	}
	c->ad = ad;
	c->id = ++ad->next_conn_id;
	TAILQ_INIT(&c->waiters);
	TAILQ_INIT(&c->leases);
	TAILQ_INSERT_TAIL(&ad->conns, c, link);
	ad->nconns++;
	bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

void conn_send(struct conn *c, const char *line, size_t len)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (evbuffer_get_length(out) + len > CONN_MAX_OUTPUT) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "client does not read its replies: closing",
				"conn=%llu", (unsigned long long)c->id);
		evbuffer_drain(out, evbuffer_get_length(out));
		conn_close_after_flush(c);
		return;
	}
	evbuffer_add(out, line, len);
}

void conn_send_reply(struct conn *c, struct preply *r)
{
	size_t len;
	char *line = preply_finish(r, &len);

	if (line != NULL)
		conn_send(c, line, len);
	free(line);
}

void conn_close_all(struct admitd *ad)
{
	struct conn *c, *nx;

	for (c = TAILQ_FIRST(&ad->conns); c != NULL; c = nx) {
		nx = TAILQ_NEXT(c, link);
		if (!c->closing)
			conn_close_after_flush(c);
	}
}

void conn_free_all(struct admitd *ad)
{
	while (!TAILQ_EMPTY(&ad->conns))
		conn_free(TAILQ_FIRST(&ad->conns));
}
