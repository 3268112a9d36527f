/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * http.c - the metrics listener: /metrics, /healthz and /readyz over HTTP.
 *
 * Owns: the evhttp server and its bound socket (the only evhttp user). It
 * is thin: /metrics is metrics_render's text; /healthz answers 200 from the
 * loop, so a wedged loop fails it; /readyz answers 200 whenever admitd
 * answers requests, in fallback too (a Redis outage must not pull every
 * pod out of its Service at once), and 503 while it starts (before the
 * socket accepts) or drains (SIGTERM received). GET and HEAD only; bodies
 * are small and the scrape runs on the loop, between requests.
 *
 * Limits, so that HTTP never starves the admission socket, and a probe is
 * answered whoever else holds connections. evhttp 2.1 has no connection
 * cap, and its timeout restarts with every byte, so this file adds four
 * things around it:
 * - at most HTTP_MAX_CONNS connections at once (one more for a moment,
 *   below);
 * - a new connection at the cap closes the one that has waited longest
 *   for its request, so that connections held open without one (idle, or
 *   trickling it) cannot lock a kubelet probe out, even when they come
 *   from the probe's own address: a probe sends its request at once, so
 *   it is the newest, and the last to go. One whose request has arrived
 *   whole (read or not), or whose reply is still being taken, never goes
 *   so: when every one is so, the new one is let in over the cap and
 *   accepting pauses (HTTP_PAUSE_MS). When every connection is new this
 *   loop turn (not yet adopted), the listener stops until the next turn.
 *   Further clients wait in the kernel's backlog, holding no descriptor
 *   of ours, and a flood of connects costs the loop at most
 *   HTTP_MAX_CONNS accepts a turn;
 * - an absolute deadline per connection (metrics_timeout): each request must
 *   have arrived whole that long after the accept or after the previous
 *   reply was queued, however it trickles, or the connection is closed;
 * - descriptors kept for the Unix socket: a connection is served only while
 *   at least http_fd_reserve() descriptors stay free (RLIMIT_NOFILE against
 *   those open), and accept() failing (EMFILE) pauses the listener instead
 *   of spinning on it.
 * evhttp makes each connection's bufferevent through our bevcb, which is
 * how we learn of a connection; its evhttp_connection (for the close
 * callback, and to close it) is the callback argument evhttp gives that
 * bufferevent, read once evhttp has set it up (http_adopt_cb).
 */

#include "http.h"

#include "conf.h"
#include "conf_value.h"
#include "log.h"
#include "rt.h"

#include <dirent.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define HTTP_MAX_CONNS	 16 /* scrapers and probes: a few at once */
#define HTTP_FD_RESERVE	 64 /* at most; a quarter of RLIMIT_NOFILE when that is less */
#define HTTP_PAUSE_MS	 100
#define HTTP_PEEK	 1024 /* bytes of an unread request looked at for its end */
#define HTTP_MAX_HEADERS 8192
#define HTTP_MAX_BODY	 1024
#define HTTP_CT_METRICS	 "text/plain; version=0.0.4; charset=utf-8"
#define HTTP_CT_PLAIN	 "text/plain; charset=utf-8"

struct http;

/* One accepted HTTP connection. */
struct http_conn {
	TAILQ_ENTRY(http_conn) link;
	struct http *h;
	struct bufferevent *bev;	 /* made by http_bev_cb; evhttp's to free */
	struct evhttp_connection *evcon; /* NULL until adopted */
	struct event *deadline_ev;
};
TAILQ_HEAD(http_conn_list, http_conn);

struct http {
	struct rt *ad;
	struct http_cb cb;
	struct evhttp *eh;
	struct evconnlistener *lev;  /* evhttp's listener: enabled and disabled here */
	struct event *adopt_ev;	     /* adopts the connections accepted this loop turn */
	struct event *resume_ev;     /* accepting again after a pause */
	struct http_conn_list conns; /* by how long each has waited for its request */
	size_t nconns;
	size_t nadopted;	 /* conns with their evcon: the ones a new one may close */
	struct timeval deadline; /* metrics_timeout */
	bool listening;		 /* the listener is enabled */
	bool paused;		 /* descriptors ran low or accept() failed: until resume_ev */
	bool freeing;		 /* evhttp_free runs: close callbacks touch nothing else */
};

/* Enable or disable accepting as the count and the pause say. */
static void http_listen_update(struct http *h)
{
	bool want = !h->paused && (h->nconns < HTTP_MAX_CONNS || h->nadopted > 0);

	if (want == h->listening)
		return;
	if ((want ? evconnlistener_enable(h->lev) : evconnlistener_disable(h->lev)) != 0) {
		log_ratelimited(LOG_SLOT_HTTP, 1000, "cannot change the http listener", "enable=%d",
				(int)want);
		return;
	}
	h->listening = want;
}

/* Stop accepting for HTTP_PAUSE_MS. */
static void http_pause(struct http *h)
{
	struct timeval tv = { 0, HTTP_PAUSE_MS * 1000 };

	h->paused = true;
	http_listen_update(h);
	if (event_add(h->resume_ev, &tv) != 0) {
		h->paused = false; /* rather than never accept again */
		http_listen_update(h);
	}
}

static void http_resume_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct http *h = arg;

	h->paused = false;
	http_listen_update(h);
}

/* accept() failed: EMFILE and the like would fire again at once, so pause. */
static void http_accept_error_cb(struct evconnlistener *lev UNUSED, void *arg)
{
	int err = EVUTIL_SOCKET_ERROR();

	if (err == EINTR || err == EWOULDBLOCK || err == ECONNABORTED)
		return;
	log_ratelimited(LOG_SLOT_HTTP, 1000, "http accept failed, pausing", "err=\"%s\"",
			strerror(err));
	http_pause(arg);
}

/*
 * Descriptors to leave free for the Unix socket: HTTP_FD_RESERVE, or a
 * quarter of the limit when that is less. Does the process have them, with
 * this connection's open? Counted in /proc/self/fd (an HTTP accept is rare;
 * a directory that cannot be opened means no descriptor to spare).
 */
static bool http_fds_spare(void)
{
	struct rlimit rl;
	struct dirent *de;
	rlim_t open_fds = 0, reserve;
	DIR *dir;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return true;
	reserve = rl.rlim_cur / 4 < HTTP_FD_RESERVE ? rl.rlim_cur / 4 : HTTP_FD_RESERVE;
	if ((dir = opendir("/proc/self/fd")) == NULL)
		return false;
	while ((de = readdir(dir)) != NULL)
		if (de->d_name[0] != '.')
			open_fds++;
	closedir(dir);
	/* (the directory's own descriptor was counted, and is closed now) */
	return open_fds + reserve <= rl.rlim_cur;
}

/* A connection's deadline from now: at accept, and once a reply is queued.
 * Should the timer fail, evhttp's idle timeout still ends a silent client. */
static void http_conn_arm(struct http_conn *hc)
{
	if (event_add(hc->deadline_ev, &hc->h->deadline) != 0)
		log_ratelimited(LOG_SLOT_HTTP, 1000, "cannot time an http connection", NULL);
}

static void http_conn_forget(struct http_conn *hc)
{
	struct http *h = hc->h;

	TAILQ_REMOVE(&h->conns, hc, link);
	h->nconns--;
	if (hc->evcon != NULL)
		h->nadopted--;
	event_free(hc->deadline_ev);
	free(hc);
	if (!h->freeing)
		http_listen_update(h);
}

/* evhttp closes a connection (it is freed after this returns). */
static void http_close_cb(struct evhttp_connection *evcon UNUSED, void *arg)
{
	http_conn_forget(arg);
}

static void http_deadline_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct http_conn *hc = arg;

	log_ratelimited(LOG_SLOT_HTTP, 1000,
			"http client sent no whole request within metrics_timeout: closed",
			"metrics_timeout_ms=%lld", (long long)hc->h->ad->conf->metrics_timeout_ms);
	evhttp_connection_free(hc->evcon); /* http_close_cb frees hc */
}

/*
 * Is an adopted connection's request in: a reply not yet taken, or a whole
 * request head among its unread bytes (peeked at: a probe whose request the
 * loop has not read yet)?
 */
static bool http_conn_answering(const struct http_conn *hc)
{
	char buf[HTTP_PEEK];
	evutil_socket_t fd = bufferevent_getfd(hc->bev);
	ssize_t n;

	if (evbuffer_get_length(bufferevent_get_output(hc->bev)) > 0)
		return true;
	n = fd < 0 ? -1 : recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
	return n > 0 && (memmem(buf, (size_t)n, "\r\n\r\n", 4) != NULL ||
			 memmem(buf, (size_t)n, "\n\n", 2) != NULL);
}

/*
 * At the cap, a new connection takes the place of the adopted one that has
 * waited longest for its request (the list is in that order), never one
 * being answered. false when every one is being answered (or is new this
 * turn): the new one is then let in over the cap, and accepting pauses.
 */
static bool http_make_room(struct http *h)
{
	struct http_conn *hc;

	for (hc = TAILQ_FIRST(&h->conns); hc != NULL; hc = TAILQ_NEXT(hc, link))
		if (hc->evcon != NULL && !http_conn_answering(hc))
			break;
	if (hc == NULL) {
		log_ratelimited(LOG_SLOT_HTTP, 1000,
				"http connections full and each being answered: accepting paused",
				"http_conns=%zu", h->nconns + 1);
		http_pause(h);
		return false;
	}
	log_ratelimited(LOG_SLOT_HTTP, 1000,
			"http connections full: the one waiting longest for its request closed",
			"http_conns=%zu", h->nconns);
	evhttp_connection_free(hc->evcon); /* http_close_cb frees hc */
	return true;
}

/*
 * evhttp asks for a new connection's bufferevent (inside its accept, before
 * it has the connection set up). It is made here and counted at once; a
 * reference is held until http_adopt_cb, so that it outlives a connection
 * evhttp gives up before then. At the cap it takes an older one's place,
 * or accepting pauses here (the listener checks after each accept).
 */
static struct bufferevent *http_bev_cb(struct event_base *base, void *arg)
{
	struct http *h = arg;
	struct http_conn *hc = calloc(1, sizeof(*hc));
	struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);

	if (hc == NULL || bev == NULL ||
	    (hc->deadline_ev = evtimer_new(base, http_deadline_cb, hc)) == NULL) {
		/* evhttp makes its own, uncounted: it goes when evhttp's timeout
		 * ends it. Memory is short; stop accepting a moment. */
		log_ratelimited(LOG_SLOT_HTTP, 1000, "out of memory for an http connection", NULL);
		free(hc);
		http_pause(h);
		return bev;
	}
	while (h->nconns >= HTTP_MAX_CONNS && http_make_room(h))
		;
	hc->h = h;
	hc->bev = bev;
	bufferevent_incref(bev);
	TAILQ_INSERT_TAIL(&h->conns, hc, link);
	h->nconns++;
	http_listen_update(h);
	event_active(h->adopt_ev, EV_TIMEOUT, 0);
	return bev;
}

/*
 * After the accepts of this loop turn: each new connection's evcon is the
 * argument evhttp set on its bufferevent's callbacks (every evhttp version
 * passes the evhttp_connection there; NULL: evhttp gave it up already). It
 * gets the close callback and its deadline, or is closed at once when the
 * descriptors it would take are the Unix socket's.
 */
static void http_adopt_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct http *h = arg;
	struct http_conn *hc, *nx;
	void *cbarg;

	for (hc = TAILQ_FIRST(&h->conns); hc != NULL; hc = nx) {
		nx = TAILQ_NEXT(hc, link);
		if (hc->evcon != NULL)
			continue;
		cbarg = NULL;
		bufferevent_getcb(hc->bev, NULL, NULL, NULL, &cbarg);
		bufferevent_decref(hc->bev); /* evhttp's alone from now on (or freed) */
		if (cbarg == NULL) {
			http_conn_forget(hc);
			continue;
		}
		hc->evcon = cbarg;
		h->nadopted++;
		evhttp_connection_set_closecb(hc->evcon, http_close_cb, hc);
		if (!http_fds_spare()) {
			log_ratelimited(LOG_SLOT_HTTP, 1000,
					"http connection refused: descriptors kept for the socket",
					"http_conns=%zu", h->nconns);
			evhttp_connection_free(hc->evcon); /* http_close_cb frees hc */
			http_pause(h);
			continue;
		}
		http_conn_arm(hc);
	}
	http_listen_update(h); /* at the cap: an adopted one can make room now */
}

/* A request arrived whole on evcon: its next one has until the deadline,
 * and it waits for it from now (the list's tail). */
static void http_conn_rearm(struct http *h, struct evhttp_connection *evcon)
{
	struct http_conn *hc;

	for (hc = TAILQ_FIRST(&h->conns); hc != NULL; hc = TAILQ_NEXT(hc, link))
		if (hc->evcon == evcon) {
			http_conn_arm(hc);
			TAILQ_REMOVE(&h->conns, hc, link);
			TAILQ_INSERT_TAIL(&h->conns, hc, link);
			return;
		}
}

/* The body and status of one request; false when body could not grow. */
static bool http_answer(struct http *h, const char *path, struct evbuffer *body, int *code,
			const char **ctype)
{
	const char *state;
	bool ready;

	*code = HTTP_OK;
	*ctype = HTTP_CT_PLAIN;
	if (strcmp(path, "/metrics") == 0) {
		*ctype = HTTP_CT_METRICS;
		return h->cb.metrics(h->cb.arg, body);
	}
	if (strcmp(path, "/healthz") == 0)
		return evbuffer_add_printf(body, "ok\n") >= 0;
	if (strcmp(path, "/readyz") == 0) {
		ready = h->cb.ready(h->cb.arg, &state);
		if (!ready)
			*code = 503;
		return evbuffer_add_printf(body, "%s backend=%s\n",
					   ready		  ? "ready"
					   : h->ad->shutting_down ? "draining"
								  : "starting",
					   state) >= 0;
	}
	*code = HTTP_NOTFOUND;
	return evbuffer_add_printf(body, "not found: try /metrics, /healthz or /readyz\n") >= 0;
}

static const char *http_reason(int code)
{
	return code == HTTP_OK ? "OK" : code == HTTP_NOTFOUND ? "Not Found" : "Service Unavailable";
}

static void http_request_cb(struct evhttp_request *req, void *arg)
{
	struct http *h = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
	const char *ctype = HTTP_CT_PLAIN, *errpos = NULL;
	struct evbuffer *body = evbuffer_new();
	int code = HTTP_OK;

	/* Before the reply: sending it may find the client gone and free the
	 * connection. The deadline then also bounds how long it takes the reply. */
	http_conn_rearm(h, evhttp_request_get_connection(req));
	if (body == NULL) {
		errpos = "evbuffer_new";
		goto fail;
	}
	if (!http_answer(h, path != NULL && *path != '\0' ? path : "/", body, &code, &ctype)) {
		errpos = "evbuffer_add";
		goto fail;
	}
	if (evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype) != 0) {
		errpos = "evhttp_add_header";
		goto fail;
	}
	evhttp_send_reply(req, code, http_reason(code), body);
	evbuffer_free(body);
	return;
fail:
	log_ratelimited(LOG_SLOT_HTTP, 1000, "http reply failed", "call=%s", errpos);
	if (body != NULL)
		evbuffer_free(body);
	evhttp_send_error(req, HTTP_INTERNAL, NULL);
}

/* The port the listener got (the conf's, or the kernel's pick for 0). */
static int http_bound_port(struct evhttp_bound_socket *bs)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	evutil_socket_t fd = evhttp_bound_socket_get_fd(bs);

	if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -1;
}

struct http *http_new(struct rt *ad, const char *hostport, const struct http_cb *cb)
{
	char host[CV_HOST_MAX + 1];
	struct evhttp_bound_socket *bs;
	struct http *h = NULL;
	const char *errpos = NULL;
	int port;

	if (cv_hostport(hostport, host, sizeof(host), &port) != NULL) {
		errpos = "cv_hostport";
		goto fail;
	}
	if ((h = calloc(1, sizeof(*h))) == NULL) {
		errpos = "calloc";
		goto fail;
	}
	h->ad = ad;
	h->cb = *cb;
	TAILQ_INIT(&h->conns);
	h->deadline.tv_sec = (time_t)(ad->conf->metrics_timeout_ms / 1000);
	h->deadline.tv_usec = (suseconds_t)(ad->conf->metrics_timeout_ms % 1000 * 1000);
	if ((h->eh = evhttp_new(ad->base)) == NULL ||
	    (h->adopt_ev = evtimer_new(ad->base, http_adopt_cb, h)) == NULL ||
	    (h->resume_ev = evtimer_new(ad->base, http_resume_cb, h)) == NULL) {
		errpos = "evhttp_new";
		goto fail;
	}
	evhttp_set_allowed_methods(h->eh, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	/* evhttp's own timeout (idle, restarted by each byte) backs the deadline up */
	evhttp_set_timeout_tv(h->eh, &h->deadline);
	evhttp_set_bevcb(h->eh, http_bev_cb, h);
	evhttp_set_max_headers_size(h->eh, HTTP_MAX_HEADERS);
	evhttp_set_max_body_size(h->eh, HTTP_MAX_BODY);
	evhttp_set_gencb(h->eh, http_request_cb, h);
	if ((bs = evhttp_bind_socket_with_handle(h->eh, host, (ev_uint16_t)port)) == NULL) {
		errpos = errno == EADDRINUSE ? "bind: address in use" : "bind";
		goto fail;
	}
	h->lev = evhttp_bound_socket_get_listener(bs);
	h->listening = true;
	evconnlistener_set_error_cb(h->lev, http_accept_error_cb);
	log_info("metrics listening", "metrics=\"%s\" port=%d", hostport, http_bound_port(bs));
	return h;
fail:
	log_error("cannot serve metrics", "metrics=\"%s\" call=%s", hostport, errpos);
	http_free(h);
	return NULL;
}

void http_free(struct http *h)
{
	if (h == NULL)
		return;
	h->freeing = true;
	/* Its connections' close callbacks free theirs; those not yet adopted
	 * (freed by evhttp, kept by our reference) go below. */
	if (h->eh != NULL)
		evhttp_free(h->eh);
	while (!TAILQ_EMPTY(&h->conns)) {
		struct http_conn *hc = TAILQ_FIRST(&h->conns);
		if (hc->evcon == NULL)
			bufferevent_decref(hc->bev);
		http_conn_forget(hc);
	}
	if (h->adopt_ev != NULL)
		event_free(h->adopt_ev);
	if (h->resume_ev != NULL)
		event_free(h->resume_ev);
	free(h);
}
