/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * reload.h - re-reading the conf while running (SIGHUP, watch_conf).
 */

#ifndef ADMITD_RELOAD_H
#define ADMITD_RELOAD_H

#include "admitd.h"

/*
 * reload_init - after start-up: remember the conf the Redis backend was
 * made from and start watching the conf when watch_conf says so. false
 * (logged) when memory ran out or the watch cannot be set up.
 */
bool reload_init(struct admitd *ad) MUST_CHECK;

/*
 * reload_args - give a conf just read the command line's --socket and
 * --redis, which win over every conf read. false when memory ran out.
 */
bool reload_args(const struct admitd *ad, struct conf *c) MUST_CHECK;

/*
 * reload_run - read the conf file again and apply it, or refuse it whole
 * (every problem logged as file:line: message; the running conf goes on).
 * Counts the outcome in ad->reloads_ok or ad->reloads_error and tells the
 * service manager (RELOADING=1, then READY=1). `why` is for the log.
 */
void reload_run(struct admitd *ad, const char *why);

/*
 * reload_tick - from the loop's housekeeping timer: replaced Redis
 * backends finish their drain and go; replaced confs go once nothing
 * points into them.
 */
void reload_tick(struct admitd *ad);

/* reload_status - "" normally; a short note after a refused reload (STATUS=). */
const char *reload_status(const struct admitd *ad);

/*
 * reload_free_backends - at exit, with the running backend: the replaced
 * ones still draining go (what they did not send expires by lease_ttl).
 */
void reload_free_backends(struct admitd *ad);

/*
 * reload_free - at exit, once connections, scopes and leases are gone:
 * the replaced confs and the watch.
 */
void reload_free(struct admitd *ad);

#endif
