/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conn.c - one client connection: bytes in, lines out.
 *
 * Owns: struct conn, its socket, its events and its two buffers. Frames
 * input into lines (LF, a trailing CR tolerated) with a hard cap of max_line
 * checked before the newline arrives; hands each line to ops.c; writes
 * replies; bounds the output a client leaves unread (below). On close it
 * cancels the connection's waiters (they book nothing) and releases its
 * leases that are not detached.
 *
 * The socket path, at an echo's pace. A connection's read event stays added
 * while it reads (EV_PERSIST: no epoll_ctl per request). One read is
 * dispatched line by line, the lines answered at once (local mode) gathered
 * in the output, and written with one write(2) at the end of the read
 * callback, in the same loop pass. Replies that come later (Redis replies,
 * timers, a release by another connection) are gathered the same way per
 * loop pass: the first makes flush_ev active, which writes them all once
 * the pass's other callbacks have run. Only when the socket takes less than
 * all of it is write_ev added; it is deleted once the output is empty.
 *
 * Unread output. Past CONN_OUTPUT_HIGH of unsent replies the connection stops
 * reading, and stops dispatching lines it has already read, until the client
 * has taken all but CONN_OUTPUT_LOW (backpressure: a pipelining client that
 * reads is slowed down, never cut off). A client that takes none of its
 * pending output for client_write_timeout is closed at once (write_ev's
 * timeout, which only runs while it is added, that is while output is
 * pending, and restarts whenever the socket takes some: an idle client, or
 * one waiting for an acquire, is never timed out). Replies to waiters are
 * not held back by backpressure: past the hard cap the connection is closed
 * at once, its output discarded.
 */

#include "conn.h"

#include "conf.h"
#include "lease.h"
#include "log.h"
#include "ops.h"
#include "proto.h"
#include "waitq.h"

#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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
/* One read(2) into the scratch buffer takes at most this much; the input
 * kept between reads is the start of a line (at most max_line) or lines held
 * back by backpressure. */
#define CONN_READ_MAX (64 * 1024)
/* Room made in the input, when it holds the start of a line, for the next read. */
#define CONN_IN_READ (16 * 1024)
/* An emptied output buffer larger than this is given back. */
#define CONN_OUT_KEEP (64 * 1024)

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

/*
 * Room for n more bytes after b's data; false: out of memory. The data is
 * moved to the front only when more than half the buffer has been drained
 * (the move costs no more than what was taken off), else the buffer doubles.
 */
static bool conn_buf_reserve(struct conn_buf *b, size_t n)
{
	size_t cap;
	char *nb;

	if (b->off + b->len + n <= b->cap)
		return true;
	if (b->len + n <= b->cap / 2) {
		memmove(b->buf, b->buf + b->off, b->len);
		b->off = 0;
		return true;
	}
	for (cap = b->cap > 0 ? b->cap * 2 : 4096; cap < b->len + n; cap *= 2)
		;
	if ((nb = malloc(cap)) == NULL)
		return false;
	if (b->len > 0)
		memcpy(nb, b->buf + b->off, b->len);
	free(b->buf);
	b->buf = nb;
	b->cap = cap;
	b->off = 0;
	return true;
}

/* Take n bytes off the front of b; an emptied buffer larger than keep is freed. */
static void conn_buf_drain(struct conn_buf *b, size_t n, size_t keep)
{
	b->off += n;
	b->len -= n;
	if (b->len > 0)
		return;
	b->off = 0;
	if (b->cap > keep) {
		free(b->buf);
		b->buf = NULL;
		b->cap = 0;
	}
}

/* Free c's events (those made: conn_new may fail halfway). */
static void conn_events_free(struct conn *c)
{
	struct event *evs[] = { c->read_ev, c->write_ev, c->flush_ev, c->close_ev };
	size_t i;

	for (i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
		if (evs[i] != NULL)
			event_free(evs[i]);
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
	conn_events_free(c); /* close_ev also when it is active: a drop's free is this one */
	evutil_closesocket(c->fd);
	free(c->in.buf);
	free(c->out.buf); /* unsent output (a dropped client's) goes with it */
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
	/* Should these fail, the callbacks still ignore it until close_ev runs. */
	if (event_del(c->read_ev) != 0 || event_del(c->write_ev) != 0 ||
	    event_del(c->flush_ev) != 0)
		log_debug("cannot stop a dropped connection's events", "conn=%llu",
			  (unsigned long long)c->id);
	conn_buf_drain(&c->out, c->out.len, 0);
	event_active(c->close_ev, EV_TIMEOUT, 0);
}

/* Backpressure on: read nothing more, dispatch nothing more. */
static void conn_pause_reads(struct conn *c)
{
	c->reads_paused = true;
	if (event_del(c->read_ev) != 0) {
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
	if (event_add(c->read_ev, NULL) != 0) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "cannot resume reading a client: closing",
				"conn=%llu", (unsigned long long)c->id);
		conn_close_after_flush(c);
	}
}

/*
 * Write what c's output holds, in one write(2). What the socket does not take
 * waits for write_ev (added now, with the write timeout); write_ev goes once
 * the output is empty. Safe anywhere: it never frees c (a failed write drops
 * it; a closing connection's last byte makes close_ev active).
 */
static void conn_flush(struct conn *c)
{
	struct timeval wto;
	int64_t wto_ms;
	ssize_t n = 0;

	if (c->dropped)
		return;
	if (c->out.len > 0) {
		n = send(c->fd, c->out.buf + c->out.off, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
		c->cl.ad->conn_writes++;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			/* The peer is gone (EPIPE, ECONNRESET): nothing more reaches it. */
			log_debug("client write failed: closing", "conn=%llu err=\"%s\"",
				  (unsigned long long)c->id, strerror(errno));
			conn_drop(c);
			return;
		}
		if (n > 0)
			conn_buf_drain(&c->out, (size_t)n, CONN_OUT_KEEP);
	}
	if (c->out.len > 0 && !c->write_armed) {
		wto_ms = c->cl.ad->conf->client_write_timeout_ms;
		wto.tv_sec = (time_t)(wto_ms / 1000);
		wto.tv_usec = (suseconds_t)(wto_ms % 1000 * 1000);
		if (event_add(c->write_ev, &wto) != 0) {
			log_ratelimited(LOG_SLOT_ACCEPT, 1000,
					"cannot wait to write to a client: closing", "conn=%llu",
					(unsigned long long)c->id);
			conn_drop(c);
			return;
		}
		c->write_armed = true;
		c->cl.ad->conn_write_waits++;
	} else if (c->out.len == 0 && c->write_armed) {
		/* Should it fail, the next write_cb finds nothing to write and tries again. */
		if (event_del(c->write_ev) == 0)
			c->write_armed = false;
	}
	if (c->closing) {
		if (c->out.len == 0)
			event_active(c->close_ev, EV_TIMEOUT, 0);
		return;
	}
	if (n > 0 && c->reads_paused && c->out.len <= CONN_OUTPUT_LOW)
		conn_resume_reads(c);
}

/* The replies of a loop pass, written once its other callbacks have run. */
static void conn_flush_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct conn *c = arg;

	c->flush_queued = false;
	if (!c->write_armed)
		conn_flush(c);
}

/* The socket takes more (or took none of it for client_write_timeout). */
static void conn_write_cb(evutil_socket_t fd UNUSED, short what, void *arg)
{
	struct conn *c = arg;

	if (c->dropped)
		return;
	if (what & EV_TIMEOUT) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "client takes none of its replies: closing",
				"conn=%llu pending=%zu", (unsigned long long)c->id, c->out.len);
		conn_free(c);
		return;
	}
	conn_flush(c);
}

/*
 * Did the peer close its end entirely (not just its write side)? A Unix
 * stream socket whose peer is gone polls POLLHUP; one whose peer only
 * shut down writing (`echo ... | socat`) still takes our replies.
 */
static bool conn_peer_gone(struct conn *c)
{
	struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };

	if (pfd.fd < 0)
		return true;
	return poll(&pfd, 1, 0) < 0 || (pfd.revents & (POLLHUP | POLLERR)) != 0;
}

/*
 * EOF: a client that is gone gets nothing more (its waiters book nothing,
 * its leases are released). One that only finished sending is still owed
 * the replies to its waiting acquires: it is closed when the last is sent.
 * Called from the read callback only (c may be freed).
 */
static void conn_eof(struct conn *c)
{
	if (!c->closing &&
	    (!TAILQ_EMPTY(&c->cl.waiters) || !TAILQ_EMPTY(&c->cl.pends) || c->out.len > 0) &&
	    !conn_peer_gone(c)) {
		c->half_closed = true;
		if (event_del(c->read_ev) != 0) {
			conn_free(c);
			return;
		}
		/* Replies already queued are flushed; waiters close it when done. */
		conn_waiter_done(c);
		return;
	}
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
 * the loop (close_ev, made active by the flush that leaves nothing, or now
 * when nothing is left to write).
 */
static void conn_close_after_flush(struct conn *c)
{
	if (c->dropped)
		return;
	c->closing = true;
	if (event_del(c->read_ev) != 0) {
		/* Still reading, and nothing dispatches what it reads. */
		conn_drop(c);
		return;
	}
	if (c->out.len == 0)
		event_active(c->close_ev, EV_TIMEOUT, 0);
}

/*
 * Dispatch the complete lines of buf (len bytes) until closing or paused;
 * returns the bytes consumed. A line longer than max_line, or more than
 * max_line without a newline, is answered line_too_long and closes (all of
 * buf consumed).
 */
static size_t conn_dispatch(struct conn *c, const char *buf, size_t len)
{
	size_t max_line = (size_t)c->cl.ad->conf->max_line, done = 0, n;
	const char *line, *eol;

	while (!c->closing && !c->reads_paused && done < len) {
		line = buf + done;
		eol = memchr(line, '\n', len - done);
		if (eol == NULL) {
			if (len - done > max_line)
				goto too_long;
			break;
		}
		n = (size_t)(eol - line);
		if (n > max_line)
			goto too_long;
		done += n + 1;
		if (n > 0 && line[n - 1] == '\r')
			n--;
		/* Answered like any malformed line: a client that sent it waits
		 * for a reply, and the replies stay in step with the lines. */
		if (n == 0)
			conn_send_reply(c,
					preply_error(NULL, ADMIT_E_BAD_REQUEST,
						     "empty line: a request is one JSON object"));
		else
			ops_dispatch(&c->cl, line, n);
	}
	return done;
too_long:
	conn_send_reply(
	    c, preply_error(NULL, ADMIT_E_LINE_TOO_LONG, "request line longer than max_line"));
	conn_close_after_flush(c);
	return len;
}

/* Dispatch the lines held in c's input, until closing or paused. */
static void conn_read_lines(struct conn *c)
{
	size_t n = conn_dispatch(c, c->in.buf + c->in.off, c->in.len);

	/* Emptied, it is freed: most reads bring whole lines and need none. */
	conn_buf_drain(&c->in, c->closing ? c->in.len : n, 0);
}

/* Keep the bytes of one read that were not dispatched; false: out of memory. */
static bool conn_keep_input(struct conn *c, const char *rest, size_t n)
{
	if (n == 0 || c->closing)
		return true;
	if (!conn_buf_reserve(&c->in, n))
		return false;
	memcpy(c->in.buf + c->in.off + c->in.len, rest, n);
	c->in.len += n;
	return true;
}

/*
 * One read(2), its lines dispatched and their replies written in one write
 * at the end. With no partial line held, it reads into a scratch buffer and
 * dispatches from there: only what is left (the start of a line, lines held
 * back) is copied into the connection's input.
 */
static void conn_read_cb(evutil_socket_t fd, short what UNUSED, void *arg)
{
	static char scratch[CONN_READ_MAX];
	struct conn *c = arg;
	ssize_t r;
	size_t used;

	if (c->dropped || c->closing || c->reads_paused)
		return;
	if (c->in.len == 0) {
		r = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
	} else {
		if (!conn_buf_reserve(&c->in, CONN_IN_READ))
			goto oom;
		r = recv(fd, c->in.buf + c->in.off + c->in.len, c->in.cap - c->in.off - c->in.len,
			 MSG_DONTWAIT);
	}
	if (r < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return;
		conn_free(c); /* ECONNRESET and the like: the peer is gone */
		return;
	}
	if (r == 0) {
		conn_eof(c);
		return;
	}
	c->in_read = true;
	if (c->in.len == 0) {
		used = conn_dispatch(c, scratch, (size_t)r);
		if (!conn_keep_input(c, scratch + used, (size_t)r - used)) {
			c->in_read = false;
			goto oom;
		}
	} else {
		c->in.len += (size_t)r;
		conn_read_lines(c);
	}
	c->in_read = false;
	if (!c->write_armed) /* else write_ev writes when the socket takes more */
		conn_flush(c);
	return;
oom:
	log_ratelimited(LOG_SLOT_ACCEPT, 1000, "out of memory reading a client: closing",
			"conn=%llu", (unsigned long long)c->id);
	conn_close_after_flush(c);
	conn_flush(c);
}

void conn_new(struct conns *cs, int fd, const struct ucred *cred)
{
	struct rt *ad = cs->rt;
	struct conn *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		evutil_closesocket(fd);
		return;
	}
	c->fd = fd;
	c->read_ev = event_new(ad->base, fd, EV_READ | EV_PERSIST, conn_read_cb, c);
	c->write_ev = event_new(ad->base, fd, EV_WRITE | EV_PERSIST, conn_write_cb, c);
	c->flush_ev = event_new(ad->base, -1, 0, conn_flush_cb, c);
	c->close_ev = evtimer_new(ad->base, conn_close_cb, c);
	if (c->read_ev == NULL || c->write_ev == NULL || c->flush_ev == NULL ||
	    c->close_ev == NULL) {
		conn_events_free(c);
		evutil_closesocket(fd);
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
	/* No read timeout: an idle client is fine. The write timeout runs only
	 * while output is pending (write_ev, conn_flush). */
	if (event_add(c->read_ev, NULL) != 0) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "cannot set up a connection: closing",
				"conn=%llu", (unsigned long long)c->id);
		conn_free(c);
	}
}

/*
 * Queue a reply, written at the end of the read callback, by flush_ev later
 * in this loop pass, or by write_ev when the socket is full. Past the high
 * watermark the connection stops reading; past the hard cap it is dropped.
 * Safe anywhere: it never frees c.
 */
static void conn_send(struct conn *c, const char *line, size_t len)
{
	size_t pending = c->out.len;

	if (c->dropped)
		return;
	if (pending + len > conn_max_output(c)) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "client does not read its replies: closing",
				"conn=%llu pending=%zu", (unsigned long long)c->id, pending);
		conn_drop(c);
		return;
	}
	if (!conn_buf_reserve(&c->out, len)) {
		log_ratelimited(LOG_SLOT_ACCEPT, 1000, "out of memory queueing a reply: closing",
				"conn=%llu", (unsigned long long)c->id);
		conn_drop(c);
		return;
	}
	memcpy(c->out.buf + c->out.off + c->out.len, line, len);
	c->out.len += len;
	c->cl.ad->conn_replies++;
	if (!c->in_read && !c->write_armed && !c->flush_queued) {
		c->flush_queued = true;
		event_active(c->flush_ev, EV_WRITE, 0);
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
