/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * loadgen.c - closed-loop load generator for the admitd benchmarks.
 *
 *   loadgen -s SOCKET -S SCOPE [-c CONNS] [-k KEYS | -K PER_CONN] [-d SECONDS]
 *           [-w WARMUP_S] [-n PAIRS] [-t TIMEOUT_MS] [-H CDF_FILE] [-1]
 *
 * Owns: CONNS connections to admitd's socket, each running acquire then
 * release in a loop (one request in flight per connection, no pipelining),
 * on key "k<i % KEYS>" (KEYS defaults to CONNS: one key per connection; -k 1
 * is one hot key), or with -K a key space: connection i's j-th acquire is on
 * key "k<i>-<j % PER_CONN>", so CONNS x PER_CONN keys, each taken once every
 * PER_CONN acquires of its connection; and its own clock (CLOCK_MONOTONIC)
 * for latencies. One thread and epoll(7): the generator must cost less than
 * what it measures, which a Python client would not, and must not cost more
 * per wakeup at 256 connections than at 16 (poll(2) would).
 *
 * The same loop drives tests/bench/echo (a fixed reply per line), which is
 * how the benchmark measures the bare cost of a Unix-socket round trip.
 *
 * -1 (one-shot): each acquire says "lease": false and nothing is released;
 * a pair is then one admission, one round trip (a scope whose release books
 * nothing, as a plain rate limit).
 *
 * Time mode (default): load for WARMUP_S + SECONDS; only pairs completed in
 * the SECONDS after the warmup are counted. Count mode (-n): exactly PAIRS
 * acquires are sent (then released), no warmup; used to count Redis calls.
 *
 * Output: one JSON line on stdout (see lg_report); with -H, the acquire
 * latency distribution of the measured window as "quantile microseconds"
 * lines in CDF_FILE (for the plot). A release answered "held":false (a lease
 * that was not the one admitd issued) is counted as unheld. Exit 0 when
 * every request was answered, 1 when a connection failed or the drain timed
 * out, 2 on usage.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define LG_RBUF	    8192
#define LG_WBUF	    1024
#define LG_LEASE    512
#define LG_MAX_ERR  8
#define LG_DRAIN_NS (5 * 1000000000LL)

enum lg_state { LG_IDLE = 0, LG_ACQ, LG_REL };

struct lg_conn {
	int fd;
	int key;
	int cycle; /* -K: which of the connection's own keys the next acquire takes */
	enum lg_state st;
	char rbuf[LG_RBUF];
	size_t rlen;
	char wbuf[LG_WBUF];
	size_t wlen, woff;
	bool want_out; /* EPOLLOUT registered */
	int64_t t_acq; /* acquire sent */
	int64_t t_rel; /* release sent */
	uint64_t next_id;
	char lease[LG_LEASE + 1];
};

/* Latency samples in microseconds, sorted at the end. */
struct lg_samples {
	uint32_t *v;
	size_t n, cap;
};

struct lg {
	/* options */
	const char *sock, *scope, *cdf_path;
	int conns, keys, timeout_ms;
	int per_conn; /* -K: keys of each connection's own (0: -k's keys) */
	double seconds, warmup;
	long long pairs_target; /* count mode when > 0 */
	bool oneshot;		/* -1: "lease": false, no release */
	/* run state */
	struct lg_conn *c;
	int64_t t0, win_start, win_end;
	bool stopping;
	int ep;
	long long sent, admitted, pairs, pairs_all, release_errors, unheld;
	long long via_redis, via_local, via_fallback, via_other;
	struct {
		char name[32];
		long long n;
	} err[LG_MAX_ERR];
	size_t nerr;
	struct lg_samples acq, pair;
	bool failed;
};

static int64_t lg_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static bool lg_sample(struct lg_samples *s, int64_t ns)
{
	if (s->n == s->cap) {
		size_t ncap = s->cap ? s->cap * 2 : 65536;
		uint32_t *nv = realloc(s->v, ncap * sizeof(*nv));
		if (nv == NULL)
			return false;
		s->v = nv;
		s->cap = ncap;
	}
	s->v[s->n++] = (uint32_t)(ns / 1000 > UINT32_MAX ? UINT32_MAX : ns / 1000);
	return true;
}

static int lg_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of sorted samples, nearest rank; 0 when empty. */
static uint32_t lg_quantile(const struct lg_samples *s, double q)
{
	size_t i;

	if (s->n == 0)
		return 0;
	i = (size_t)(q * (double)s->n);
	return s->v[i >= s->n ? s->n - 1 : i];
}

static void lg_count_error(struct lg *g, const char *line)
{
	const char *p = strstr(line, "\"error\":\"");
	char name[32] = "unparsed";
	size_t i, n = 0;

	if (p != NULL) {
		p += 9;
		while (p[n] != '"' && p[n] != '\0' && n < sizeof(name) - 1) {
			name[n] = p[n];
			n++;
		}
		name[n] = '\0';
	}
	for (i = 0; i < g->nerr; i++)
		if (strcmp(g->err[i].name, name) == 0)
			break;
	if (i == g->nerr) {
		if (g->nerr == LG_MAX_ERR)
			i = LG_MAX_ERR - 1; /* lump the rest into the last slot */
		else
			snprintf(g->err[g->nerr++].name, sizeof(g->err[0].name), "%s", name);
	}
	g->err[i].n++;
}

/* Ask epoll for EPOLLOUT on c exactly while it has bytes it could not write. */
static bool lg_want_out(struct lg *g, struct lg_conn *c, bool want)
{
	struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c };

	if (c->want_out == want)
		return true;
	c->want_out = want;
	return epoll_ctl(g->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0;
}

static bool lg_flush(struct lg *g, struct lg_conn *c)
{
	ssize_t w = write(c->fd, c->wbuf + c->woff, c->wlen - c->woff);

	if (w < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return false;
		w = 0;
	}
	c->woff += (size_t)w;
	return lg_want_out(g, c, c->woff < c->wlen);
}

/* Queue one request line on c and try to write it now. */
static bool lg_send(struct lg *g, struct lg_conn *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool lg_send(struct lg *g, struct lg_conn *c, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(c->wbuf, sizeof(c->wbuf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(c->wbuf))
		return false;
	c->wlen = (size_t)n;
	c->woff = 0;
	return lg_flush(g, c);
}

/* Start the next acquire on c, or leave it idle when the run is over. */
static bool lg_next(struct lg *g, struct lg_conn *c)
{
	if (g->stopping || (g->pairs_target > 0 && g->sent >= g->pairs_target)) {
		c->st = LG_IDLE;
		return true;
	}
	c->st = LG_ACQ;
	c->t_acq = lg_now();
	g->sent++;
	if (g->per_conn > 0) {
		int j = c->cycle;
		c->cycle = (c->cycle + 1) % g->per_conn;
		return lg_send(
		    g, c,
		    "{\"op\":\"acquire\",\"scope\":\"%s\",\"key\":\"k%d-%d\",\"id\":%" PRIu64
		    ",\"timeout_ms\":%d%s}\n",
		    g->scope, c->key, j, c->next_id++, g->timeout_ms,
		    g->oneshot ? ",\"lease\":false" : "");
	}
	return lg_send(g, c,
		       "{\"op\":\"acquire\",\"scope\":\"%s\",\"key\":\"k%d\",\"id\":%" PRIu64
		       ",\"timeout_ms\":%d%s}\n",
		       g->scope, c->key, c->next_id++, g->timeout_ms,
		       g->oneshot ? ",\"lease\":false" : "");
}

static void lg_count_backend(struct lg *g, const char *line)
{
	const char *p = strstr(line, "\"backend\":\"");

	if (p == NULL) {
		g->via_other++;
		return;
	}
	p += 11;
	if (strncmp(p, "redis\"", 6) == 0)
		g->via_redis++;
	else if (strncmp(p, "local\"", 6) == 0)
		g->via_local++;
	else if (strncmp(p, "fallback\"", 9) == 0)
		g->via_fallback++;
	else
		g->via_other++;
}

static bool lg_in_window(const struct lg *g, int64_t t)
{
	return t >= g->win_start && t < g->win_end;
}

/* c's pair (its acquire, and its release unless one-shot) ended at t. */
static bool lg_pair_done(struct lg *g, struct lg_conn *c, int64_t t)
{
	g->pairs_all++;
	if (lg_in_window(g, t)) {
		g->pairs++;
		if (lg_in_window(g, c->t_acq) && !lg_sample(&g->pair, t - c->t_acq))
			return false;
	}
	return lg_next(g, c);
}

/* One reply line (NUL-terminated, no newline) arrived on c. */
static bool lg_reply(struct lg *g, struct lg_conn *c, const char *line)
{
	int64_t t = lg_now();
	bool ok = strncmp(line, "{\"ok\":true", 10) == 0;

	if (c->st == LG_ACQ) {
		const char *p = strstr(line, "\"lease\":\"");
		size_t n = 0;
		if (!ok || (p == NULL) != g->oneshot) {
			lg_count_error(g, line);
			return lg_next(g, c);
		}
		g->admitted++;
		lg_count_backend(g, line);
		if (lg_in_window(g, c->t_acq) && lg_in_window(g, t) &&
		    !lg_sample(&g->acq, t - c->t_acq))
			return false;
		if (g->oneshot) /* admitted, nothing to release: the pair is done */
			return lg_pair_done(g, c, t);
		p += 9;
		while (p[n] != '"' && p[n] != '\0' && n < LG_LEASE) {
			c->lease[n] = p[n];
			n++;
		}
		c->lease[n] = '\0';
		if (p[n] != '"') {
			/* Releasing a truncated lease would release nothing. */
			fprintf(stderr, "loadgen: a lease longer than %d bytes\n", LG_LEASE);
			return false;
		}
		c->st = LG_REL;
		c->t_rel = t;
		return lg_send(g, c, "{\"op\":\"release\",\"lease\":\"%s\"}\n", c->lease);
	}
	if (c->st == LG_REL) {
		if (!ok)
			g->release_errors++;
		else if (strstr(line, "\"held\":false") != NULL)
			g->unheld++;
		return lg_pair_done(g, c, t);
	}
	fprintf(stderr, "loadgen: unsolicited reply: %.200s\n", line);
	return false;
}

static bool lg_read(struct lg *g, struct lg_conn *c)
{
	ssize_t r = read(c->fd, c->rbuf + c->rlen, sizeof(c->rbuf) - 1 - c->rlen);
	char *start, *nl;

	if (r < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
	if (r == 0) {
		fprintf(stderr, "loadgen: the server closed a connection\n");
		return false;
	}
	c->rlen += (size_t)r;
	c->rbuf[c->rlen] = '\0';
	start = c->rbuf;
	while ((nl = memchr(start, '\n', c->rlen - (size_t)(start - c->rbuf))) != NULL) {
		*nl = '\0';
		if (!lg_reply(g, c, start))
			return false;
		start = nl + 1;
	}
	c->rlen -= (size_t)(start - c->rbuf);
	memmove(c->rbuf, start, c->rlen);
	if (c->rlen == sizeof(c->rbuf) - 1) {
		fprintf(stderr, "loadgen: reply line longer than %d bytes\n", LG_RBUF);
		return false;
	}
	return true;
}

static int lg_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool lg_all_idle(const struct lg *g)
{
	int i;

	for (i = 0; i < g->conns; i++)
		if (g->c[i].st != LG_IDLE)
			return false;
	return true;
}

#define LG_EVENTS 256

/* The event loop: run until the end of the window (or PAIRS sent), then drain. */
static bool lg_run(struct lg *g)
{
	struct epoll_event ev[LG_EVENTS];
	int64_t drain_until = 0;
	int i;

	for (i = 0; i < g->conns; i++)
		if (!lg_next(g, &g->c[i]))
			return false;
	for (;;) {
		int64_t now = lg_now();
		int tmo = 100, n;
		if (g->pairs_target <= 0 && !g->stopping && now >= g->win_end) {
			g->stopping = true;
			drain_until = now + LG_DRAIN_NS;
		}
		if (g->pairs_target > 0 && drain_until == 0 && g->sent >= g->pairs_target)
			drain_until = now + LG_DRAIN_NS;
		/* Every connection has one request in flight until the run stops:
		 * only then can they all be idle, so the O(conns) check waits. */
		if (drain_until != 0 && lg_all_idle(g))
			break;
		if (drain_until != 0 && now >= drain_until) {
			fprintf(stderr, "loadgen: replies still missing after the drain\n");
			return false;
		}
		if (!g->stopping && g->pairs_target <= 0 && (g->win_end - now) / 1000000 < tmo)
			tmo = (int)((g->win_end - now) / 1000000) + 1;
		n = epoll_wait(g->ep, ev, LG_EVENTS, tmo);
		if (n < 0 && errno != EINTR) {
			perror("loadgen: epoll_wait");
			return false;
		}
		for (i = 0; i < n; i++) {
			struct lg_conn *c = ev[i].data.ptr;
			if ((ev[i].events & EPOLLOUT) && !lg_flush(g, c))
				return false;
			if ((ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !lg_read(g, c))
				return false;
		}
	}
	return true;
}

/* The acquire latency distribution, for the plot: "quantile microseconds". */
static bool lg_write_cdf(const struct lg *g)
{
	FILE *f = fopen(g->cdf_path, "w");
	int i;

	if (f == NULL) {
		perror("loadgen: -H");
		return false;
	}
	fprintf(f, "# acquire latency of %zu samples: quantile microseconds\n", g->acq.n);
	if (g->acq.n > 0) {
		for (i = 0; i < 1000; i++)
			fprintf(f, "%.3f %u\n", i / 1000.0, lg_quantile(&g->acq, i / 1000.0));
		fprintf(f, "0.9995 %u\n0.9999 %u\n1.000 %u\n", lg_quantile(&g->acq, 0.9995),
			lg_quantile(&g->acq, 0.9999), lg_quantile(&g->acq, 1.0));
	}
	return fclose(f) == 0;
}

static void lg_report(struct lg *g, double elapsed_s)
{
	double secs = g->pairs_target > 0 ? elapsed_s : g->seconds;
	size_t i;

	printf("{\"conns\":%d,\"keys\":%d,\"keys_per_conn\":%d,\"seconds\":%.3f,\"elapsed_s\":%.3f,"
	       "\"pairs\":%lld,"
	       "\"pairs_per_s\":%.1f,\"sent\":%lld,\"admitted\":%lld,\"pairs_all\":%lld,"
	       "\"release_errors\":%lld,\"unheld\":%lld,"
	       "\"backend\":{\"redis\":%lld,\"local\":%lld,\"fallback\":%lld,\"other\":%lld},"
	       "\"errors\":{",
	       g->conns, g->per_conn > 0 ? g->conns * g->per_conn : g->keys, g->per_conn, secs,
	       elapsed_s, g->pairs, secs > 0 ? (double)g->pairs / secs : 0.0, g->sent, g->admitted,
	       g->pairs_all, g->release_errors, g->unheld, g->via_redis, g->via_local,
	       g->via_fallback, g->via_other);
	for (i = 0; i < g->nerr; i++)
		printf("%s\"%s\":%lld", i ? "," : "", g->err[i].name, g->err[i].n);
	printf("},\"acquire_us\":{\"n\":%zu,\"p50\":%u,\"p90\":%u,\"p99\":%u,\"p999\":%u,"
	       "\"max\":%u},"
	       "\"pair_us\":{\"n\":%zu,\"p50\":%u,\"p99\":%u,\"max\":%u}}\n",
	       g->acq.n, lg_quantile(&g->acq, 0.5), lg_quantile(&g->acq, 0.9),
	       lg_quantile(&g->acq, 0.99), lg_quantile(&g->acq, 0.999), lg_quantile(&g->acq, 1.0),
	       g->pair.n, lg_quantile(&g->pair, 0.5), lg_quantile(&g->pair, 0.99),
	       lg_quantile(&g->pair, 1.0));
}

static void lg_usage(void)
{
	fprintf(stderr, "usage: loadgen -s SOCKET -S SCOPE [-c CONNS] [-k KEYS | -K PER_CONN]\n"
			"               [-d SECONDS] [-w WARMUP_S] [-n PAIRS] [-t TIMEOUT_MS]\n"
			"               [-H CDF_FILE] [-1]\n");
}

int main(int argc, char **argv)
{
	struct lg g = {
		.conns = 16, .keys = 0, .timeout_ms = 1000, .seconds = 3.0, .warmup = 0.5, .ep = -1
	};
	int opt, i, rc = 1;
	int64_t t_end;

	while ((opt = getopt(argc, argv, "s:S:c:k:K:d:w:n:t:H:1")) != -1) {
		switch (opt) {
		case 's': g.sock = optarg; break;
		case 'S': g.scope = optarg; break;
		case 'c': g.conns = atoi(optarg); break;
		case 'k': g.keys = atoi(optarg); break;
		case 'K': g.per_conn = atoi(optarg); break;
		case 'd': g.seconds = atof(optarg); break;
		case 'w': g.warmup = atof(optarg); break;
		case 'n': g.pairs_target = atoll(optarg); break;
		case 't': g.timeout_ms = atoi(optarg); break;
		case 'H': g.cdf_path = optarg; break;
		case '1': g.oneshot = true; break;
		default: lg_usage(); return 2;
		}
	}
	if (g.sock == NULL || g.scope == NULL || g.conns < 1 || g.conns > 100000 ||
	    g.seconds <= 0 || g.warmup < 0 || strlen(g.scope) > 64 || g.per_conn < 0 ||
	    g.per_conn > 100000000 / g.conns || (g.per_conn > 0 && g.keys > 0)) {
		lg_usage();
		return 2;
	}
	if (g.keys <= 0)
		g.keys = g.conns;
	signal(SIGPIPE, SIG_IGN);
	g.ep = epoll_create1(EPOLL_CLOEXEC);
	g.c = calloc((size_t)g.conns, sizeof(*g.c));
	if (g.ep < 0 || g.c == NULL)
		goto cleanup;
	for (i = 0; i < g.conns; i++)
		g.c[i].fd = -1;
	for (i = 0; i < g.conns; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &g.c[i] };
		g.c[i].key = g.per_conn > 0 ? i : i % g.keys;
		g.c[i].fd = lg_connect(g.sock);
		if (g.c[i].fd < 0) {
			fprintf(stderr, "loadgen: connect %s: %s\n", g.sock, strerror(errno));
			goto cleanup;
		}
		if (epoll_ctl(g.ep, EPOLL_CTL_ADD, g.c[i].fd, &ev) != 0) {
			perror("loadgen: epoll_ctl");
			goto cleanup;
		}
	}
	g.t0 = lg_now();
	if (g.pairs_target > 0) {
		g.win_start = g.t0;
		g.win_end = INT64_MAX;
	} else {
		g.win_start = g.t0 + (int64_t)(g.warmup * 1e9);
		g.win_end = g.win_start + (int64_t)(g.seconds * 1e9);
	}
	g.failed = !lg_run(&g);
	t_end = lg_now();
	if (g.acq.n > 0)
		qsort(g.acq.v, g.acq.n, sizeof(uint32_t), lg_cmp_u32);
	if (g.pair.n > 0)
		qsort(g.pair.v, g.pair.n, sizeof(uint32_t), lg_cmp_u32);
	lg_report(&g, (double)(t_end - g.t0) / 1e9);
	if (g.cdf_path != NULL && !lg_write_cdf(&g))
		g.failed = true;
	rc = g.failed ? 1 : 0;
cleanup:
	if (g.c != NULL)
		for (i = 0; i < g.conns; i++)
			if (g.c[i].fd >= 0)
				close(g.c[i].fd);
	if (g.ep >= 0)
		close(g.ep);
	free(g.c);
	free(g.acq.v);
	free(g.pair.v);
	return rc;
}
