/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * sdnotify.h - tell the service manager where admitd is in its life.
 *
 * The sd_notify(3) datagram protocol in a few lines: one AF_UNIX datagram of
 * newline-separated KEY=VALUE assignments to $NOTIFY_SOCKET (a path, or an
 * abstract name written with a leading '@'). Without $NOTIFY_SOCKET every
 * call is a no-op, so admitd runs the same under systemd, Kubernetes or a
 * shell.
 */

#ifndef ADMITD_SDNOTIFY_H
#define ADMITD_SDNOTIFY_H

#include <stdbool.h>
#include <stdint.h>

struct sdnotify;

/*
 * sdnotify_open - read $NOTIFY_SOCKET and $WATCHDOG_USEC/$WATCHDOG_PID.
 * Returns false only when $NOTIFY_SOCKET is set but unusable (logged); *out
 * is then NULL, as it is when the variable is absent (true). The caller
 * owns *out (sdnotify_close).
 */
bool sdnotify_open(struct sdnotify **out);
void sdnotify_close(struct sdnotify *n);

/*
 * sdnotify_send - send one message, e.g. "READY=1\nSTATUS=...". A NULL n
 * is a no-op that succeeds. false (logged, rate-limited) when the datagram
 * could not be sent; nothing retries it.
 */
bool sdnotify_send(struct sdnotify *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * sdnotify_watchdog_usec - the watchdog interval the manager asked for
 * ($WATCHDOG_USEC, when $WATCHDOG_PID is absent or ours), 0 when none.
 */
uint64_t sdnotify_watchdog_usec(const struct sdnotify *n);

/* sdnotify_monotonic_usec - CLOCK_MONOTONIC in µs, for RELOADING=1's MONOTONIC_USEC=. */
uint64_t sdnotify_monotonic_usec(void);

#endif
