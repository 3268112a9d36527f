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
 */

#include "http.h"

#include "admitd.h"
#include "backend.h"
#include "conf_value.h"
#include "log.h"

#include <event2/buffer.h>
#include <errno.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* A scraper that sends nothing for this long is disconnected. */
#define HTTP_TIMEOUT_S	 10
#define HTTP_MAX_HEADERS 8192
#define HTTP_MAX_BODY	 1024
#define HTTP_CT_METRICS	 "text/plain; version=0.0.4; charset=utf-8"
#define HTTP_CT_PLAIN	 "text/plain; charset=utf-8"

struct http {
	struct admitd *ad;
	struct evhttp *eh;
};

bool http_ready(const struct admitd *ad, const char **state)
{
	int64_t since;

	*state = ad->redis != NULL ? backend_state(ad->redis, &since) : "local";
	/* The Unix listener exists from the moment requests are taken until
	 * the drain starts (main.c creates it last and frees it on SIGTERM). */
	return ad->server != NULL && !ad->shutting_down;
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
		return metrics_render(h->ad, body);
	}
	if (strcmp(path, "/healthz") == 0)
		return evbuffer_add_printf(body, "ok\n") >= 0;
	if (strcmp(path, "/readyz") == 0) {
		ready = http_ready(h->ad, &state);
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

struct http *http_new(struct admitd *ad, const char *hostport)
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
	if ((h->eh = evhttp_new(ad->base)) == NULL) {
		errpos = "evhttp_new";
		goto fail;
	}
	evhttp_set_allowed_methods(h->eh, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_timeout(h->eh, HTTP_TIMEOUT_S);
	evhttp_set_max_headers_size(h->eh, HTTP_MAX_HEADERS);
	evhttp_set_max_body_size(h->eh, HTTP_MAX_BODY);
	evhttp_set_gencb(h->eh, http_request_cb, h);
	if ((bs = evhttp_bind_socket_with_handle(h->eh, host, (ev_uint16_t)port)) == NULL) {
		errpos = errno == EADDRINUSE ? "bind: address in use" : "bind";
		goto fail;
	}
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
	if (h->eh != NULL)
		evhttp_free(h->eh);
	free(h);
}
