/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conn.c - one client connection: bytes in, lines out.
 *
 * Owns: struct conn and its bufferevent. Frames input into lines (LF, a
 * trailing CR tolerated) with a hard cap of max_line checked before the
 * newline arrives; hands each line to ops.c; writes replies; bounds the
 * output a client leaves unread (below). On close it cancels the
 * connection's waiters (they book nothing) and releases its leases that are
 * not detached.
 *
 * Unread output. Past CONN_OUTPUT_HIGH of unsent replies the connection stops
 * reading, and stops dispatching lines it has already read, until the client
 * has taken all but CONN_OUTPUT_LOW (backpressure: a pipelining client that
 * reads is slowed down, never cut off). A client that takes none of its
 * pending output for client_write_timeout is closed at once (the libevent
 * write timeout only runs while output is pending: an idle client, or one
 * waiting for an acquire, is never timed out). Replies to waiters are not
 * held back by backpressure: past the hard cap the connection is closed at
 * once, its output discarded (libevent owns the start of a socket
 * bufferevent's output, so it cannot be drained; it goes with the
 * bufferevent).
 */

#include "conn.h"

#include "conf.h"
#include "lease.h"
#include "log.h"
#include "ops.h"
#include "proto.h"
#include "waitq.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/*
 * Backpressure watermarks. A client that sends its whole pipeline before it
 * reads anything gets every reply only if the replies the daemon holds plus
 * both socket buffers cover it: 100000 pings (1.4 MB in, 1.2 MB out) need
 * HIGH above ~1.1 MiB with Linux's default 208 KiB buffers. 2 MiB leaves room.
 */
#define CONN_OUTPUT_HIGH (2 * 1024 * 1024)
#define CONN_OUTPUT_LOW	 (512 * 1024)
/* The hard cap; conn_max_output raises it so one max_line line's reply fits past HIGH. */
#define CONN_MAX_OUTPUT (4 * 1024 * 1024)

static void conn_close_after_flush(struct conn *c);
static void conn_read_lines(struct conn *c);
static void conn_send_reply(struct conn *c, struct preply *r);
static void conn_waiter_done(struct conn *c);

/* The connection a client is (conn embeds it first). */
static struct conn *conn_of(struct client *cl)
{
	return (struct conn *)(void *)((char *)cl - offsetof(struct conn, cl));
}

static void conn_cl_reply(struct client *cl, struct preply *r)
{
	conn_send_reply(conn_of(cl), r);
}

static void conn_cl_waiter_done(struct client *cl)
{
	conn_waiter_done(conn_of(cl));
}

/* How the layers below answer a connection (client.h). */
static const struct client_cb conn_client_cb = { .reply = conn_cl_reply,
						 .waiter_done = conn_cl_waiter_done };

static size_t conn_output_len(struct conn *c)
{
	return evbuffer_get_length(bufferevent_get_output(c->bev));
}

static size_t conn_max_output(struct conn *c)
{
	size_t line2 = 2 * (size_t)c->cl.ad->conf->max_line + CONN_OUTPUT_HIGH;

	return line2 > CONN_MAX_OUTPUT ? line2 : CONN_MAX_OUTPUT;
}

static void conn_free(struct conn *c)
{
	struct conns *cs = c->set;
	struct rt *rt = cs->rt;

	c->closing = true; /* what follows must not schedule another close */
	while (!TAILQ_EMPTY(&c->cl.waiters))
		waitq_cancel(TAILQ_FIRST(&c->cl.waiters));
	lease_conn_closed(&c->cl);
	ops_conn_closed(&c->cl);
	TAILQ_REMOVE(&cs->list, c, link);
	rt->nconns--;
	bufferevent_free(c->bev); /* unsent output (a dropped client's) goes with it */
	event_free(c->close_ev);  /* also when it is active: a drop's free is this one */
	free(c);
	if (rt->shutting_down && rt->nconns == 0 && cs->drained != NULL)
		event_active(cs->drained, EV_TIMEOUT, 0);
}

/*
 * Close now, without a flush: the client is not taking its replies. The free
 * runs from the loop (close_ev): the caller may be deep in this connection's
 * read loop or in one of its waiters' callbacks. Until then every callback
 * leaves it alone and conn_send discards.
 */
static void conn_drop(struct conn *c)
{
	if (c->dropped)
		return;
	c->dropped = true;
	c->closing = true;
	/* Should this fail, the callbacks still ignore it until close_ev runs. */
	if (bufferevent_disable(c->bev, EV_READ | EV_WRITE) != 0)
		log_debug("cannot disable a dropped connection", "conn=%llu",
			  (unsigned long long)c->id);
	event_active(c->close_ev, EV_TIMEOUT, 0);
}

/* Backpressure on: read nothing more, dispatch nothing more. */
static void conn_pause_reads(struct conn *c)
{
	c->reads_paused = true;
	if (bufferevent_disable(c->bev, EV_READ) != 0) {
		/* It would go on reading into its input without bound. */
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "cannot pause reading a client: closing",
				"conn=%llu", (unsigned long long)c->id);
		conn_drop(c);
	}
}

/* The client took enough: dispatch what was read meanwhile, then read again. */
static void conn_resume_reads(struct conn *c)
{
	c->reads_paused = false;
	conn_read_lines(c);
	if (c->reads_paused || c->closing || c->half_closed)
		return;
	if (bufferevent_enable(c->bev, EV_READ) != 0) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "cannot resume reading a client: closing",
				"conn=%llu", (unsigned long long)c->id);
		conn_close_after_flush(c);
	}
}

/* Called after a write that left at most CONN_OUTPUT_LOW (the write low watermark). */
static void conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	size_t left = evbuffer_get_length(bufferevent_get_output(bev));

	if (c->dropped)
		return;
	if (c->closing) {
		if (left == 0)
			conn_free(c);
		return;
	}
	if (c->reads_paused)
		conn_resume_reads(c);
}

/*
 * Did the peer close its end entirely (not just its write side)? A Unix
 * stream socket whose peer is gone polls POLLHUP; one whose peer only
 * shut down writing (`echo ... | socat`) still takes our replies.
 */
static bool conn_peer_gone(struct conn *c)
{
	struct pollfd pfd = { .fd = bufferevent_getfd(c->bev), .events = POLLOUT };

	if (pfd.fd < 0)
		return true;
	return poll(&pfd, 1, 0) < 0 || (pfd.revents & (POLLHUP | POLLERR)) != 0;
}

/*
 * EOF: a client that is gone gets nothing more (its waiters book nothing,
 * its leases are released). One that only finished sending is still owed
 * the replies to its waiting acquires: it is closed when the last is sent.
 * A write timeout (output pending, none of it taken for client_write_timeout)
 * closes at once: waiting for a flush is what it timed out on.
 */
static void conn_event_cb(struct bufferevent *bev UNUSED, short what, void *arg)
{
	struct conn *c = arg;

	if (c->dropped)
		return; /* close_ev frees it */
	if (what & BEV_EVENT_TIMEOUT) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "client takes none of its replies: closing",
				"conn=%llu pending=%zu", (unsigned long long)c->id,
				conn_output_len(c));
		conn_free(c);
		return;
	}
	if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR) && !c->closing &&
	    (!TAILQ_EMPTY(&c->cl.waiters) || !TAILQ_EMPTY(&c->cl.pends) ||
	     conn_output_len(c) > 0) &&
	    !conn_peer_gone(c)) {
		c->half_closed = true;
		/* (libevent has already disabled reading at EOF: this cannot fail.) */
		if (bufferevent_disable(c->bev, EV_READ) != 0) {
			conn_free(c);
			return;
		}
		/* Replies already queued are flushed; waiters close it when done. */
		conn_waiter_done(c);
		return;
	}
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		conn_free(c);
}

void conn_sweep(struct conns *cs)
{
	struct conn *c, *nx;

	/* A half-closed client that has since gone entirely gives its waiters up
	 * within a sweep period, not only when a reply fails to reach it. */
	for (c = TAILQ_FIRST(&cs->list); c != NULL; c = nx) {
		nx = TAILQ_NEXT(c, link);
		if (c->half_closed && !c->closing && conn_peer_gone(c))
			conn_free(c);
	}
}

/* One of c's waiters was answered or cancelled. */
static void conn_waiter_done(struct conn *c)
{
	if (c->half_closed && !c->closing && TAILQ_EMPTY(&c->cl.waiters) &&
	    TAILQ_EMPTY(&c->cl.pends))
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
	if (c->dropped)
		return;
	c->closing = true;
	if (bufferevent_disable(c->bev, EV_READ) != 0) {
		/* Still reading, and nothing dispatches what it reads. */
		conn_drop(c);
		return;
	}
	if (conn_output_len(c) == 0)
		event_active(c->close_ev, EV_TIMEOUT, 0);
}

/* Dispatch the complete lines read so far, until closing or paused. */
static void conn_read_lines(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	size_t max_line = (size_t)c->cl.ad->conf->max_line;

	while (!c->closing && !c->reads_paused) {
		struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, NULL, EVBUFFER_EOL_LF);
		size_t len;
		const char *line;

		if (eol.pos < 0) {
			if (evbuffer_get_length(in) > max_line)
				goto too_long;
			return;
		}
		len = (size_t)eol.pos;
		if (len > max_line)
			goto too_long;
		/* Decoded where it lies (made contiguous), not copied out: the
		 * codec takes a length, and only this loop consumes the input. */
		line = (const char *)evbuffer_pullup(in, (ev_ssize_t)(len + 1));
		if (line == NULL) {
			log_ratelimited(LOG_SLOT_ACCEPT, 1000, "cannot read a line: closing",
					"conn=%llu", (unsigned long long)c->id);
			conn_close_after_flush(c);
			return;
		}
		if (len > 0 && line[len - 1] == '\r')
			len--;
		/* Answered like any malformed line: a client that sent it waits
		 * for a reply, and the replies stay in step with the lines. */
		if (len == 0)
			conn_send_reply(c,
					preply_error(NULL, ADMIT_E_BAD_REQUEST,
						     "empty line: a request is one JSON object"));
		else
			ops_dispatch(&c->cl, line, len);
		if (evbuffer_drain(in, (size_t)eol.pos + 1) != 0) {
			log_ratelimited(LOG_SLOT_ACCEPT, 1000, "cannot drain a line: closing",
					"conn=%llu", (unsigned long long)c->id);
			conn_close_after_flush(c);
			return;
		}
	}
	return;
too_long:
	conn_send_reply(
	    c, preply_error(NULL, ADMIT_E_LINE_TOO_LONG, "request line longer than max_line"));
	/* Early, to free it; should it fail, it goes with the bufferevent. */
	if (evbuffer_drain(in, evbuffer_get_length(in)) != 0)
		log_debug("cannot drain an over-long line", "conn=%llu", (unsigned long long)c->id);
	conn_close_after_flush(c);
}

static void conn_read_cb(struct bufferevent *bev UNUSED, void *arg)
{
	struct conn *c = arg;

	if (!c->dropped)
		conn_read_lines(c);
}

void conn_new(struct conns *cs, int fd, const struct ucred *cred)
{
	struct rt *ad = cs->rt;
	struct conn *c = calloc(1, sizeof(*c));
	int64_t wto_ms = ad->conf->client_write_timeout_ms;
	struct timeval wto = { (time_t)(wto_ms / 1000), (suseconds_t)(wto_ms % 1000 * 1000) };

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
	c->cl.ad = ad;
	c->cl.cb = &conn_client_cb;
	c->set = cs;
	c->id = ++cs->next_id;
	c->peer.pid = -1;
	c->peer.uid = (uid_t)-1;
	c->peer.gid = (gid_t)-1;
	if (cred != NULL) {
		c->peer = *cred;
		c->peer_known = true;
	}
	TAILQ_INIT(&c->cl.waiters);
	TAILQ_INIT(&c->cl.leases);
	TAILQ_INIT(&c->cl.pends);
	TAILQ_INSERT_TAIL(&cs->list, c, link);
	ad->nconns++;
	bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	/* The write callback runs when a write leaves at most LOW (resume reading). */
	bufferevent_setwatermark(c->bev, EV_WRITE, CONN_OUTPUT_LOW, 0);
	/* No read timeout: an idle client is fine. The write timeout runs only
	 * while output is pending and restarts whenever the socket takes some. */
	if (bufferevent_set_timeouts(c->bev, NULL, &wto) != 0 ||
	    bufferevent_enable(c->bev, EV_READ | EV_WRITE) != 0) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "cannot set up a connection: closing",
				"conn=%llu", (unsigned long long)c->id);
		conn_free(c);
	}
}

/*
 * Queue a reply. Past the high watermark the connection stops reading; past
 * the hard cap it is dropped. Safe anywhere: it never frees c.
 */
static void conn_send(struct conn *c, const char *line, size_t len)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	size_t pending = evbuffer_get_length(out);

	if (c->dropped)
		return;
	if (pending + len > conn_max_output(c)) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "client does not read its replies: closing",
				"conn=%llu pending=%zu", (unsigned long long)c->id, pending);
		conn_drop(c);
		return;
	}
	if (evbuffer_add(out, line, len) != 0) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "out of memory queueing a reply: closing",
				"conn=%llu", (unsigned long long)c->id);
		conn_drop(c);
		return;
	}
	if (pending + len > CONN_OUTPUT_HIGH && !c->reads_paused && !c->closing)
		conn_pause_reads(c);
}

static void conn_send_reply(struct conn *c, struct preply *r)
{
	size_t len;
	char *line = preply_finish(r, &len);

	if (line != NULL)
		conn_send(c, line, len);
	free(line);
}

void conn_revoke(struct conn *c, const char *msg)
{
	if (c->closing)
		return;
	conn_send_reply(c, preply_error(NULL, ADMIT_E_FORBIDDEN, msg));
	conn_close_after_flush(c);
	/* After the close is set: a waiter the cancel lets in behind one of
	 * these is this connection's to release when it is freed. */
	while (!TAILQ_EMPTY(&c->cl.waiters))
		waitq_cancel(TAILQ_FIRST(&c->cl.waiters));
}

void conn_close_all(struct conns *cs)
{
	struct conn *c, *nx;

	for (c = TAILQ_FIRST(&cs->list); c != NULL; c = nx) {
		nx = TAILQ_NEXT(c, link);
		if (!c->closing)
			conn_close_after_flush(c);
	}
}

void conn_free_all(struct conns *cs)
{
	while (!TAILQ_EMPTY(&cs->list))
		conn_free(TAILQ_FIRST(&cs->list));
}
