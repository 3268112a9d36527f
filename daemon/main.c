/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * main.c - command line, start-up and shutdown order, signals.
 *
 * Owns: struct admitd and the order things are created and destroyed in.
 * Nothing else: every behaviour lives in the module named for it.
 */

#include "admitd.h"

#include "backend.h"
#include "clock.h"
#include "conf_value.h"
#include "engine.h"
#include "http.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"
#include "redis_url.h"
#include "reload.h"
#include "scope.h"
#include "sdnotify.h"
#include "server.h"
#include "waitq.h"

#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADMITD_DEFAULT_CONF "/etc/admitd/admitd.conf"
#define ADMITD_EXIT_CONF    2
/* How long a stopping daemon waits for clients to read their last replies. */
#define ADMITD_DRAIN_MS 500

static void usage(FILE *out)
{
	fprintf(out, "usage: admitd [-c FILE] [--socket PATH] [--redis URL] [--metrics ADDR] [-t]\n"
		     "       admitd -h | --version | --help-conf\n"
		     "\n"
		     "  -c, --conf FILE    conf file (default " ADMITD_DEFAULT_CONF ")\n"
		     "      --socket PATH  listen here instead of the conf's socket\n"
		     "      --redis URL    use this Redis instead of the conf's redis\n"
		     "                     (\"\" forces local mode); without it, $ADMITD_REDIS\n"
		     "                     when set and not empty. A password here shows in\n"
		     "                     ps: prefer redis_password_file or $ADMITD_REDIS\n"
		     "      --metrics ADDR HOST:PORT for /metrics instead of the conf's metrics\n"
		     "                     (in a pod: the pod's IP, from the downward API)\n"
		     "  -t, --test         check the conf, print problems as file:line: message,\n"
		     "                     exit 0 when it is good and 2 when it is not\n"
		     "  -h, --help         this text\n"
		     "      --version      print the version\n"
		     "      --help-conf    every conf key with its default\n");
}

/*
 * The Redis URL that overrides the conf's redis: --redis, else
 * $ADMITD_REDIS (set and not empty), else NULL (the conf's). A password in
 * --redis is readable by every user through ps and /proc/PID/cmdline, so
 * that case gets one warning, the URL redacted; the environment is readable
 * only by the same user. *on_cmdline says which it was, for that warning.
 */
static const char *admitd_redis_arg(const char *arg, bool *on_cmdline)
{
	const char *env = getenv("ADMITD_REDIS");

	*on_cmdline = arg != NULL;
	if (arg != NULL)
		return arg;
	return env != NULL && env[0] != '\0' ? env : NULL;
}

/* The warning for a password given in --redis: says where it belongs instead. */
static void admitd_warn_cmdline_password(const char *url)
{
	char redacted[512];

	redis_url_redact(url, redacted, sizeof(redacted));
	/* redact replaces a password and nothing else: equal means none */
	if (strcmp(redacted, url) == 0)
		return;
	log_warn("--redis has a password, which any user can read with ps: put it in "
		 "redis_password_file (a sentinel's in sentinel_password_file), or the URL in "
		 "$ADMITD_REDIS",
		 "redis=\"%s\"", redacted);
}

/* The backend state STATUS= last showed (a static string), NULL before READY=1. */
static const char *admitd_told;

/* The backend's state, as the service manager's STATUS= shows it. */
static const char *admitd_state(struct admitd *ad)
{
	int64_t since;

	return ad->rt.redis != NULL ? backend_state(ad->rt.redis, &since) : "local";
}

static bool admitd_metrics(void *arg, struct evbuffer *out)
{
	return metrics_render(arg, out);
}

/* /readyz: the Unix listener exists from the moment requests are taken
 * until the drain starts (created last, freed on SIGTERM). */
static bool admitd_ready(void *arg, const char **state)
{
	struct admitd *ad = arg;

	*state = admitd_state(ad);
	return ad->server != NULL && !ad->rt.shutting_down;
}

/*
 * Every 100 ms: a slice of the idle-key sweep, what replaced confs and
 * backends can let go, and STATUS= when the backend's state changed; every
 * second, the conns.
 */
static void admitd_gc_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	static unsigned tick;
	struct admitd *ad = arg;
	const char *state = admitd_state(ad);

	if (tick++ % 10 == 0)
		conn_sweep(&ad->conns);
	kq_sweep(&ad->rt);
	reload_tick(ad);
	if (ad->notify != NULL && !ad->rt.shutting_down && admitd_told != NULL &&
	    strcmp(admitd_told, state) != 0 &&
	    sdnotify_send(ad->notify, "STATUS=backend=%s%s", state, reload_status(ad)))
		admitd_told = state;
}

/* WATCHDOG=1 at half the interval the service manager asked for. */
static void admitd_watchdog_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct admitd *ad = arg;

	(void)sdnotify_send(ad->notify, "WATCHDOG=1");
}

static void admitd_exit_cb(evutil_socket_t fd UNUSED, short what UNUSED, void *arg)
{
	struct admitd *ad = arg;

	event_base_loopexit(ad->rt.base, NULL);
}

/*
 * SIGTERM/SIGINT: stop accepting, answer every waiter `shutting_down`, let
 * clients read their replies for a moment, then leave the loop. A second
 * signal leaves at once.
 */
static void admitd_signal_cb(evutil_socket_t sig, short what UNUSED, void *arg)
{
	struct admitd *ad = arg;
	struct timeval drain = { 0, ADMITD_DRAIN_MS * 1000 };

	if (ad->rt.shutting_down) {
		event_base_loopbreak(ad->rt.base);
		return;
	}
	log_info("shutting down", "signal=%d", (int)sig);
	(void)sdnotify_send(ad->notify, "STOPPING=1\nSTATUS=stopping: draining clients");
	ad->rt.shutting_down = true;
	server_free(ad->server);
	ad->server = NULL;
	waitq_shutdown_all(&ad->rt);
	conn_close_all(&ad->conns);
	event_add(ad->exit_ev, &drain);
	if (ad->rt.nconns == 0)
		event_active(ad->exit_ev, EV_TIMEOUT, 0);
}

/* SIGHUP: read the conf again (reload.c). */
static void admitd_sighup_cb(evutil_socket_t sig UNUSED, short what UNUSED, void *arg)
{
	reload_run(arg, "SIGHUP");
}

/*
 * Before the pool goes: the releases of the leases that just ended (and
 * what the queue owes Redis) are sent and their replies awaited, bounded by
 * redis_timeout, so that a rolling deploy leaves no slot booked in Redis
 * for lease_ttl. A reconciliation that may not go yet (a stalled call's
 * bound, at most about one redis_timeout away) extends the wait to its time
 * plus redis_timeout, never past three. Detached leases stay: any daemon
 * can release them.
 */
static void admitd_drain_redis(struct admitd *ad)
{
	int64_t t = ad->rt.conf->redis_timeout_ms, start = clock_mono_ms();
	int64_t until = start + t, due = backend_last_due(ad->rt.redis);
	struct timeval tick = { 0, 5 * 1000 };

	if (due + t > until)
		until = due + t < start + 3 * t ? due + t : start + 3 * t;

	backend_flush(ad->rt.redis);
	while (!backend_idle(ad->rt.redis) && clock_mono_ms() < until) {
		if (event_base_loopexit(ad->rt.base, &tick) != 0 ||
		    event_base_dispatch(ad->rt.base) < 0)
			break;
		backend_flush(ad->rt.redis);
	}
	if (!backend_idle(ad->rt.redis))
		log_warn("stopping before redis answered every release", "waited_ms=%lld",
			 (long long)ad->rt.conf->redis_timeout_ms);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "conf", required_argument, NULL, 'c' },
		{ "socket", required_argument, NULL, 'S' },
		{ "redis", required_argument, NULL, 'R' },
		{ "metrics", required_argument, NULL, 'M' },
		{ "test", no_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "help-conf", no_argument, NULL, 'K' },
		{ NULL, 0, NULL, 0 },
	};
	const char *conf_path = ADMITD_DEFAULT_CONF, *socket_arg = NULL, *redis_arg = NULL;
	const char *metrics_arg = NULL, *bad;
	char host[CV_HOST_MAX + 1];
	int port;
	struct admitd ad;
	const struct http_cb http_cb = { .metrics = admitd_metrics,
					 .ready = admitd_ready,
					 .arg = &ad };
	struct event *sigterm = NULL, *sigint = NULL, *sighup = NULL;
	struct timeval gc_every = { 0, 100 * 1000 };
	bool test_only = false, redis_on_cmdline;
	int opt, rc = 1;

	while ((opt = getopt_long(argc, argv, "c:th", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c': conf_path = optarg; break;
		case 'S': socket_arg = optarg; break;
		case 'R': redis_arg = optarg; break;
		case 'M': metrics_arg = optarg; break;
		case 't': test_only = true; break;
		case 'h': usage(stdout); return 0;
		case 'V':
			printf("admitd %s (protocol %d)\n", ADMITD_VERSION, ADMIT_PROTO_VERSION);
			return 0;
		case 'K': conf_dump_keys(stdout); return 0;
		default: usage(stderr); return ADMITD_EXIT_CONF;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return ADMITD_EXIT_CONF;
	}
	/* Checked as the conf's metrics would be: a typo is a usage error, not a
	 * daemon that starts and then cannot serve its probes. */
	if (metrics_arg != NULL && (bad = cv_hostport(metrics_arg, host, sizeof(host), &port))) {
		fprintf(stderr, "admitd: --metrics %s: %s\n", metrics_arg, bad);
		return ADMITD_EXIT_CONF;
	}

	memset(&ad, 0, sizeof(ad));
	TAILQ_INIT(&ad.conns.list);
	ad.conns.rt = &ad.rt;
	ad.rt.dec = &eng_decider;
	ad.rt.fleet = &backend_fleet;
	ad.rt.slot_freed = waitq_slot_freed;
	ad.conf_path = conf_path;
	ad.socket_arg = socket_arg;
	ad.redis_arg = admitd_redis_arg(redis_arg, &redis_on_cmdline);
	ad.metrics_arg = metrics_arg;
	ad.rt.conf = conf_load(conf_path, stderr);
	if (ad.rt.conf == NULL)
		return ADMITD_EXIT_CONF;
	if (test_only) {
		printf("%s: conf is good (%zu scopes)\n", conf_path, ad.rt.conf->nscopes);
		conf_free(ad.rt.conf);
		return 0;
	}
	if (!reload_args(&ad, ad.rt.conf))
		fatal("out of memory", NULL);
	if (ad.rt.conf->log_level != NULL && !log_set_level_name(ad.rt.conf->log_level))
		fatal("bad log_level", "log_level=%s", ad.rt.conf->log_level);
	if (redis_on_cmdline)
		admitd_warn_cmdline_password(ad.redis_arg);

	signal(SIGPIPE, SIG_IGN);
	if (!sdnotify_open(&ad.notify))
		log_warn("not telling the service manager anything", NULL);
	ad.rt.start_ms = clock_mono_ms();
	ad.rt.base = event_base_new();
	ad.rt.leases = htab_new(); /* its keys are nonces the daemon draws (lease.c) */
	if (ad.rt.base == NULL || ad.rt.leases == NULL || !htab_issued(ad.rt.leases) ||
	    !scopes_init(&ad.rt))
		fatal("cannot initialise", NULL);
	ad.gc_ev = event_new(ad.rt.base, -1, EV_PERSIST, admitd_gc_cb, &ad);
	ad.exit_ev = evtimer_new(ad.rt.base, admitd_exit_cb, &ad);
	ad.conns.drained = ad.exit_ev;
	sigterm = evsignal_new(ad.rt.base, SIGTERM, admitd_signal_cb, &ad);
	sigint = evsignal_new(ad.rt.base, SIGINT, admitd_signal_cb, &ad);
	sighup = evsignal_new(ad.rt.base, SIGHUP, admitd_sighup_cb, &ad);
	if (ad.gc_ev == NULL || ad.exit_ev == NULL || sigterm == NULL || sigint == NULL ||
	    sighup == NULL || event_add(ad.gc_ev, &gc_every) != 0 ||
	    event_add(sigterm, NULL) != 0 || event_add(sigint, NULL) != 0 ||
	    event_add(sighup, NULL) != 0)
		fatal("cannot set up events", NULL);
	/* Before the Redis grace below: /readyz says "starting" meanwhile. */
	if (ad.rt.conf->metrics != NULL &&
	    (ad.http = http_new(&ad.rt, ad.rt.conf->metrics, &http_cb)) == NULL)
		goto out;
	if (ad.rt.conf->redis != NULL && ad.rt.conf->redis[0] != '\0') {
		ad.rt.redis = backend_new(&ad.rt);
		if (ad.rt.redis == NULL)
			goto out;
	}
	if (ad.rt.redis != NULL) {
		/* One connect's grace (at most redis_timeout) before listening: a
		 * healthy Redis decides from the first request, and a Redis that is
		 * down delays start-up by no more than that (then: fallback). */
		int64_t until = clock_mono_ms() + ad.rt.conf->redis_timeout_ms;
		struct timeval tick = { 0, 10 * 1000 };
		while (!backend_up(ad.rt.redis) && !ad.rt.shutting_down &&
		       clock_mono_ms() < until) {
			event_base_loopexit(ad.rt.base, &tick);
			event_base_dispatch(ad.rt.base);
		}
		if (ad.rt.shutting_down) {
			rc = 0;
			goto out;
		}
	}
	ad.server = server_new(&ad.conns);
	if (ad.server == NULL || !reload_init(&ad))
		goto out;
	if (sdnotify_watchdog_usec(ad.notify) > 0) {
		uint64_t half = sdnotify_watchdog_usec(ad.notify) / 2;
		if (half < 1000)
			half = 1000; /* a timer, not a busy loop */
		struct timeval every = { (time_t)(half / 1000000), (suseconds_t)(half % 1000000) };
		ad.watchdog_ev = event_new(ad.rt.base, -1, EV_PERSIST, admitd_watchdog_cb, &ad);
		if (ad.watchdog_ev == NULL || event_add(ad.watchdog_ev, &every) != 0)
			fatal("cannot set up the watchdog timer", NULL);
		(void)sdnotify_send(ad.notify, "WATCHDOG=1");
	}
	/* The socket accepts: ready, as far as the service manager is concerned. */
	admitd_told = admitd_state(&ad);
	(void)sdnotify_send(ad.notify, "READY=1\nSTATUS=backend=%s", admitd_told);
	{
		int64_t since;
		const char *state = ad.rt.redis ? backend_state(ad.rt.redis, &since) : "local";
		log_info("admitd started",
			 "version=%s socket=\"%s\" backend=%s state=%s scopes=%zu", ADMITD_VERSION,
			 ad.rt.conf->socket, ad.rt.redis ? "redis" : "local", state, ad.rt.nscopes);
		if (ad.rt.redis != NULL && !backend_up(ad.rt.redis)) {
			char url[512];
			redis_url_redact(ad.rt.conf->redis, url, sizeof(url));
			log_warn("redis is down: serving from the in-process fallback until it "
				 "answers",
				 "redis=\"%s\"", url);
		}
	}
	event_base_dispatch(ad.rt.base);
	rc = 0;
	log_info("admitd stopped", NULL);
out:
	/* Connections first (their waiters cancel, their leases release), then
	 * the backend (completing what is in flight), then what they pointed at. */
	server_free(ad.server);
	ad.server = NULL;
	ad.rt.shutting_down = true;
	conn_free_all(&ad.conns);
	if (ad.rt.redis != NULL)
		admitd_drain_redis(&ad);
	/* /readyz answers "draining" until the loop has stopped for good. */
	http_free(ad.http);
	ad.http = NULL;
	backend_free(ad.rt.redis);
	ad.rt.redis = NULL;
	reload_free_backends(&ad);
	waitq_free_all(&ad.rt);
	scopes_free(&ad.rt);
	lease_free_all(&ad.rt);
	reload_free(&ad);
	preply_spares_free();
	if (sigterm)
		event_free(sigterm);
	if (sigint)
		event_free(sigint);
	if (sighup)
		event_free(sighup);
	if (ad.gc_ev)
		event_free(ad.gc_ev);
	if (ad.exit_ev)
		event_free(ad.exit_ev);
	if (ad.watchdog_ev)
		event_free(ad.watchdog_ev);
	sdnotify_close(ad.notify);
	event_base_free(ad.rt.base);
	conf_free(ad.rt.conf);
	return rc;
}
