/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admitd.h - the process: struct admitd.
 *
 * Owns nothing by itself: main.c makes struct admitd and frees it at exit.
 * It holds the runtime root every layer below the front works on (rt.h),
 * the front's connections and listeners, and what only the process has:
 * its timers, its reloads and the service manager. Each runtime object is
 * declared by the file that owns it: scope.h (scopes, keys), waitq.h
 * (waiters), lease.h (leases), client.h, ops.h, conn.h.
 */

#ifndef ADMITD_ADMITD_H
#define ADMITD_ADMITD_H

#include "conn.h"
#include "rt.h"

#include <stdint.h>

struct event;
struct http;
struct reload;
struct sdnotify;
struct server;

/* admitd: main.c. */
struct admitd {
	struct rt rt;	    /* the scopes, keys, leases and deciders */
	struct conns conns; /* the Unix socket's connections (conn.c) */
	struct server *server;
	struct http *http; /* NULL when metrics is off */
	struct event *gc_ev;
	struct event *exit_ev;
	/* Reloads (reload.c) and the service manager (sdnotify.c). */
	const char *conf_path;	 /* -c, re-read by a reload */
	const char *socket_arg;	 /* --socket, applied over every conf read */
	const char *redis_arg;	 /* --redis (or $ADMITD_REDIS), likewise */
	const char *metrics_arg; /* --metrics, likewise */
	struct reload *reload;	 /* confs and backends a reload replaced, the conf watch */
	struct sdnotify *notify; /* NULL when not run by a service manager */
	struct event *watchdog_ev;
};

#endif
