/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * http.h - the HTTP listener of `metrics = HOST:PORT`: /metrics, /healthz,
 * /readyz, served by evhttp on the daemon's own loop.
 */

#ifndef ADMITD_HTTP_H
#define ADMITD_HTTP_H

#include <stdbool.h>

struct evbuffer;
struct http;
struct rt;

/* What the listener answers with: the process fills it (main.c). */
struct http_cb {
	/* metrics - append /metrics's text to out; false when out could not grow. */
	bool (*metrics)(void *arg, struct evbuffer *out);
	/*
	 * ready - what /readyz answers: true (200) while admitd answers
	 * requests, in fallback too; false (503) while it starts or drains.
	 * *state is the backend state: "local", "redis" or "fallback".
	 */
	bool (*ready)(void *arg, const char **state);
	void *arg;
};

/*
 * http_new - listen on hostport (validated by the conf) on rt's loop, and
 * answer through cb (copied).
 * NULL after logging why when it cannot (bad address, port in use). The
 * listener reads ad at each request; it owns nothing of it.
 */
struct http *http_new(struct rt *ad, const char *hostport, const struct http_cb *cb);

/* http_free - close the listener and any request in progress; NULL is fine. */
void http_free(struct http *h);

#endif
