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

struct admitd;
struct http;

/*
 * http_new - listen on hostport (validated by the conf) on ad's loop.
 * NULL after logging why when it cannot (bad address, port in use). The
 * listener reads ad at each request; it owns nothing of it.
 */
struct http *http_new(struct admitd *ad, const char *hostport);

/* http_free - close the listener and any request in progress; NULL is fine. */
void http_free(struct http *h);

/*
 * http_ready - what /readyz answers: true (200) while admitd answers
 * requests, in fallback too; false (503) while it starts or drains. *state
 * is the backend state: "local", "redis" or "fallback".
 */
bool http_ready(const struct admitd *ad, const char **state);

#endif
