/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * reload.c - re-reading the conf while running: SIGHUP and watch_conf.
 *
 * Owns: the order of a reload (read, refuse or apply, tell the service
 * manager), the confs a reload replaced and the Redis backends it replaced,
 * each kept until nothing points into it, and the conf watch.
 *
 * A conf with any error is refused whole: nothing of it applies. A good one
 * applies at once: [admitd] keys by their table flag (conf_reload_keys:
 * live, by remaking the Redis connections, or not before a restart, with
 * the running value kept and a warning), scopes through scopes_reload.
 *
 * Lifetimes. Waiters, leases and replies owed are re-pointed at the new
 * conf, but three things may still point into a replaced one: a removed
 * scope with leases (it keeps its conf), calls a Redis backend has in flight
 * or queued (their targets name scopes and classes), and the Redis backend
 * itself (made from one conf's URL and credentials). So a replaced conf is
 * freed once no retired scope uses it, it is not the backend's, and neither
 * the running backend nor a replaced one has a call outstanding. Under
 * steady Redis traffic that last moment may come late; memory then holds
 * one conf per reload until it does.
 */

#include "reload.h"

#include "backend.h"
#include "clock.h"
#include "confwatch.h"
#include "log.h"
#include "ops.h"
#include "lease.h"
#include "scope.h"
#include "waitq.h"
#include "sdnotify.h"
#include "server.h"

#include <stdlib.h>
#include <string.h>

/* A replaced backend finishes what it owes for at most this many redis_timeouts. */
#define RELOAD_DRAIN_TIMEOUTS 3

struct reload_conf {
	struct conf *c;
	struct reload_conf *next;
};

struct reload_drain {
	struct backend *b;
	struct conf *born; /* the conf it was made from */
	int64_t until;	   /* mono ms: freed then even if calls are outstanding */
	struct reload_drain *next;
};

struct reload {
	struct reload_conf *old;    /* replaced confs, newest first */
	struct reload_drain *drain; /* replaced backends */
	struct conf *redis_conf;    /* the conf ad->rt.redis was made from */
	struct confwatch *watch;    /* NULL unless watch_conf */
	bool refused;		    /* the last reload was refused */
};

/* What a reload learns about the [admitd] keys. */
struct reload_keys {
	bool redis;  /* the backend must be remade */
	int restart; /* keys that need a restart */
};

static void reload_key_cb(void *arg, const char *key, enum conf_change how)
{
	struct reload_keys *k = arg;

	switch (how) {
	case CONF_CHANGE_LIVE: log_info("conf key changed", "key=%s", key); break;
	case CONF_CHANGE_REDIS:
		log_info("conf key changed: reconnecting to redis", "key=%s", key);
		k->redis = true;
		break;
	case CONF_CHANGE_RESTART:
		log_warn("conf key changed: needs a restart, the running value is kept", "key=%s",
			 key);
		k->restart++;
		break;
	}
}

static bool reload_override(char **field, const char *value)
{
	char *v;

	if (value == NULL)
		return true;
	if ((v = strdup(value)) == NULL)
		return false;
	free(*field);
	*field = v;
	return true;
}

bool reload_args(const struct admitd *ad, struct conf *c)
{
	return reload_override(&c->socket, ad->socket_arg) &&
	       reload_override(&c->redis, ad->redis_arg) &&
	       reload_override(&c->metrics, ad->metrics_arg);
}

static void reload_watch_cb(void *arg)
{
	reload_run(arg, "watch_conf");
}

/* Start or stop the watch as the running conf says. */
static void reload_watch_apply(struct admitd *ad)
{
	struct reload *rl = ad->reload;

	if (ad->rt.conf->watch_conf && rl->watch == NULL)
		rl->watch = confwatch_new(ad->rt.base, ad->conf_path, reload_watch_cb, ad);
	else if (!ad->rt.conf->watch_conf && rl->watch != NULL) {
		confwatch_free(rl->watch);
		rl->watch = NULL;
		log_info("no longer watching the conf", NULL);
	}
}

bool reload_init(struct admitd *ad)
{
	if ((ad->reload = calloc(1, sizeof(*ad->reload))) == NULL)
		return false;
	ad->reload->redis_conf = ad->rt.redis != NULL ? ad->rt.conf : NULL;
	reload_watch_apply(ad);
	return !ad->rt.conf->watch_conf || ad->reload->watch != NULL;
}

static bool reload_redis_set(const struct conf *c)
{
	return c->redis != NULL && c->redis[0] != '\0';
}

/* The new backend for nc, before anything changes; *nb NULL for local mode. */
static bool reload_backend_new(struct admitd *ad, struct conf *nc, struct backend **nb)
{
	struct conf *running = ad->rt.conf;

	*nb = NULL;
	if (!reload_redis_set(nc))
		return true;
	/* backend_new reads the conf it is made from through ad */
	ad->rt.conf = nc;
	*nb = backend_new(&ad->rt);
	ad->rt.conf = running;
	return *nb != NULL;
}

/* The running backend (if any) goes on draining in d; nb (may be NULL)
 * takes over. d was allocated beforehand, so this cannot fail. */
static void reload_backend_swap(struct admitd *ad, struct backend *nb, struct conf *nc,
				struct reload_drain *d)
{
	struct reload *rl = ad->reload;

	if (ad->rt.redis != NULL) {
		d->b = ad->rt.redis;
		d->born = rl->redis_conf;
		d->until = clock_mono_ms() + RELOAD_DRAIN_TIMEOUTS * ad->rt.conf->redis_timeout_ms;
		d->next = rl->drain;
		rl->drain = d;
		backend_flush(d->b);
	} else {
		free(d);
	}
	ad->rt.redis = nb;
	rl->redis_conf = nb != NULL ? nc : NULL;
}

static void reload_notify(struct admitd *ad)
{
	int64_t since;
	const char *state = ad->rt.redis != NULL ? backend_state(ad->rt.redis, &since) : "local";

	(void)sdnotify_send(ad->notify, "READY=1\nSTATUS=backend=%s%s", state, reload_status(ad));
}

void reload_run(struct admitd *ad, const char *why)
{
	struct reload *rl = ad->reload;
	struct reload_keys keys = { 0 };
	struct reload_conf *rc = NULL;
	struct backend *nb = NULL;
	struct reload_drain *drain = NULL;
	struct conf *nc = NULL;
	struct conn *c;
	const char *errpos = NULL;

	if (ad->rt.shutting_down)
		return;
	if (rl == NULL) {
		log_warn("reload asked for during start-up: ignored, ask again once started",
			 "cause=%s", why);
		return;
	}
	(void)sdnotify_send(ad->notify,
			    "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading the conf",
			    (unsigned long long)sdnotify_monotonic_usec());
	log_info("reloading the conf", "path=\"%s\" cause=%s", ad->conf_path, why);
	/* conf_load writes each problem as file:line: message, as at start-up */
	if ((nc = conf_load(ad->conf_path, stderr)) == NULL) {
		errpos = "the conf has errors";
		goto refuse;
	}
	if (!reload_args(ad, nc) || (rc = calloc(1, sizeof(*rc))) == NULL ||
	    !conf_reload_keys(ad->rt.conf, nc, reload_key_cb, &keys)) {
		errpos = "out of memory";
		goto refuse;
	}
	if (keys.redis &&
	    ((drain = calloc(1, sizeof(*drain))) == NULL || !reload_backend_new(ad, nc, &nb))) {
		errpos = drain == NULL ? "out of memory" : "the new redis settings cannot be used";
		goto refuse;
	}
	if (!scopes_reload(&ad->rt, nc)) {
		errpos = "out of memory";
		goto refuse;
	}
	waitq_reload(&ad->rt, ad->rt.conf, nc);
	lease_reload(&ad->rt);
	for (c = TAILQ_FIRST(&ad->conns.list); c != NULL; c = TAILQ_NEXT(c, link))
		ops_reload(&c->cl);
	if (keys.redis) {
		reload_backend_swap(ad, nb, nc, drain);
		nb = NULL;
		drain = NULL;
	}
	/* Applied: the running conf is replaced. */
	rc->c = ad->rt.conf;
	rc->next = rl->old;
	rl->old = rc;
	ad->rt.conf = nc;
	if (nc->log_level != NULL && !log_set_level_name(nc->log_level))
		log_warn("bad log_level kept the previous level", "log_level=%s", nc->log_level);
	reload_watch_apply(ad);
	server_recheck_peers(&ad->conns);
	rl->refused = false;
	ad->rt.reloads_ok++;
	/* not the URL: it may hold a password */
	log_info("conf reloaded", "scopes=%zu restart_needed=%d backend=%s", ad->rt.nscopes,
		 keys.restart, ad->rt.redis != NULL ? "redis" : "local");
	waitq_wake_all(&ad->rt);
	reload_notify(ad);
	return;
refuse:
	backend_free(nb);
	free(drain);
	free(rc);
	conf_free(nc);
	rl->refused = true;
	ad->rt.reloads_error++;
	log_error("conf reload refused: the running conf is kept", "path=\"%s\" reason=\"%s\"",
		  ad->conf_path, errpos);
	reload_notify(ad);
}

static int reload_count(const struct reload *rl)
{
	const struct reload_conf *rc;
	int n = 0;

	for (rc = rl->old; rc != NULL; rc = rc->next)
		n++;
	return n;
}

/* May the replaced confs go? Only when no backend call can name them. */
static bool reload_calls_done(const struct admitd *ad)
{
	return ad->reload->drain == NULL && (ad->rt.redis == NULL || backend_idle(ad->rt.redis));
}

void reload_tick(struct admitd *ad)
{
	struct reload *rl = ad->reload;
	struct reload_drain **dp;
	struct reload_conf **cp;
	int64_t now = clock_mono_ms();

	if (rl == NULL)
		return;
	for (dp = &rl->drain; *dp != NULL;) {
		struct reload_drain *d = *dp;
		backend_flush(d->b);
		if (!backend_idle(d->b) && now < d->until) {
			dp = &d->next;
			continue;
		}
		if (!backend_idle(d->b))
			log_warn("replaced redis backend stopped before answering every call",
				 "waited_ms=%lld", (long long)(now - d->until));
		*dp = d->next;
		backend_free(d->b);
		free(d);
	}
	if (!reload_calls_done(ad))
		return;
	for (cp = &rl->old; *cp != NULL;) {
		struct reload_conf *rc = *cp;
		if (rc->c == rl->redis_conf || scopes_points_into(&ad->rt, rc->c)) {
			cp = &rc->next;
			continue;
		}
		*cp = rc->next;
		conf_free(rc->c);
		free(rc);
		log_debug("replaced conf freed", "left=%d", reload_count(rl));
	}
}

const char *reload_status(const struct admitd *ad)
{
	return ad->reload != NULL && ad->reload->refused
		   ? " (the last reload was refused: see the log)"
		   : "";
}

void reload_free_backends(struct admitd *ad)
{
	struct reload *rl = ad->reload;

	while (rl != NULL && rl->drain != NULL) {
		struct reload_drain *d = rl->drain;
		rl->drain = d->next;
		backend_flush(d->b);
		backend_free(d->b);
		free(d);
	}
}

void reload_free(struct admitd *ad)
{
	struct reload *rl = ad->reload;

	if (rl == NULL)
		return;
	reload_free_backends(ad);
	while (rl->old != NULL) {
		struct reload_conf *rc = rl->old;
		rl->old = rc->next;
		conf_free(rc->c);
		free(rc);
	}
	confwatch_free(rl->watch);
	free(rl);
	ad->reload = NULL;
}
