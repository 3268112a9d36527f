/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_top.c - `admit top` and the activity table `admit status` shares.
 *
 * Owns: the columns of the table (a static array: heading, what it shows),
 * the contended keys listed after it (the status reply's "contended"),
 * the arithmetic over two status replies (counter deltas over the uptime
 * between them; wait percentiles from the per-bucket deltas of the wait
 * histogram, interpolated within a bucket as Prometheus's
 * histogram_quantile does), and top's terminal: raw mode on standard input
 * so that `q` needs no Enter, the alternate screen, a redraw in place each
 * interval, and the terminal given back as it was on `q`, on a signal and
 * on a failed request. Plain ANSI escapes (cursor home, erase line and
 * below), which every terminal admit is run in understands: curses would
 * add a library dependency for a dozen lines of output.
 */

#include "admit_top.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define TOP_LINE_MAX   512
#define TOP_SCOPE_MAX  32 /* a longer scope name is cut in the table */
#define TOP_KEY_MAX    40 /* ... and a longer key in the contended keys */
#define TOP_CELL_WIDTH 7

enum top_kind {
	TC_ADMITTED, /* admissions per second */
	TC_REFUSAL,  /* refusals per second of one error code */
	TC_CANCELED, /* acquires whose client left, per second */
	TC_WAITING,  /* gauge */
	TC_LEASES,   /* gauge */
	TC_QUANTILE, /* wait percentile (ms) of the interval's admissions */
};

static const struct top_col {
	const char *head;
	enum top_kind kind;
	const char *code; /* TC_REFUSAL */
	double q;	  /* TC_QUANTILE */
} top_cols[] = {
	{ "ADM/s", TC_ADMITTED, NULL, 0 },
	{ "LIM/s", TC_REFUSAL, "limited", 0 },
	{ "BUDG/s", TC_REFUSAL, "budget_exceeded", 0 },
	{ "TMO/s", TC_REFUSAL, "timeout", 0 },
	{ "FULL/s", TC_REFUSAL, "too_many_waiters", 0 },
	{ "UNAV/s", TC_REFUSAL, "unavailable", 0 },
	{ "EXCD/s", TC_REFUSAL, "exceeds_limit", 0 },
	{ "CANC/s", TC_CANCELED, NULL, 0 },
	{ "WAIT", TC_WAITING, NULL, 0 },
	{ "LEASES", TC_LEASES, NULL, 0 },
	{ "P50ms", TC_QUANTILE, NULL, 0.50 },
	{ "P99ms", TC_QUANTILE, NULL, 0.99 },
};

#define TOP_NCOLS (sizeof(top_cols) / sizeof(top_cols[0]))

static int64_t top_refusals(const struct admit_scope_stat *st, const char *code)
{
	for (size_t i = 0; i < st->nrefusals; i++)
		if (strcmp(st->refusals[i].name, code) == 0)
			return st->refusals[i].count;
	return 0;
}

/* A counter of st for column c (0 when st is NULL: not there before). */
static int64_t top_counter(const struct admit_scope_stat *st, const struct top_col *c)
{
	int64_t v = 0;

	if (st == NULL)
		return 0;
	if (c->kind == TC_ADMITTED)
		v = st->admitted;
	else if (c->kind == TC_REFUSAL)
		v = top_refusals(st, c->code);
	else if (c->kind == TC_CANCELED)
		v = st->canceled;
	return v > 0 ? v : 0;
}

static const struct admit_scope_stat *top_scope(const struct admit_result *r, const char *name)
{
	for (size_t i = 0; r != NULL && i < r->nscopes; i++)
		if (strcmp(r->scopes[i].name, name) == 0)
			return &r->scopes[i];
	return NULL;
}

/*
 * The q-quantile (0..1) of the waits counted per bucket in d[0..n), the
 * bucket i ending at bounds[i] (the last one open above): linear within
 * the bucket it falls in. -1 when d counts nothing; *above is set when it
 * falls above the last bound (the value is then that bound).
 */
static double top_quantile(const int64_t *d, size_t n, const int64_t *bounds, double q, bool *above)
{
	double total = 0, rank, cum = 0, lo, hi;
	size_t i;

	*above = false;
	for (i = 0; i < n; i++)
		total += (double)d[i];
	if (total <= 0)
		return -1;
	rank = q * total;
	for (i = 0; i < n; i++) {
		if (d[i] > 0 && cum + (double)d[i] >= rank)
			break;
		cum += (double)d[i];
	}
	if (i >= n - 1) {
		*above = true;
		return (double)bounds[n - 2];
	}
	lo = i == 0 ? 0 : (double)bounds[i - 1];
	hi = (double)bounds[i];
	return lo + (hi - lo) * (rank - cum) / (double)d[i];
}

/* Append a formatted cell to line (bounded). */
static void top_cell(char *line, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void top_cell(char *line, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*len >= TOP_LINE_MAX - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line + *len, TOP_LINE_MAX - *len, fmt, ap);
	va_end(ap);
	if (n > 0)
		*len += (size_t)n < TOP_LINE_MAX - *len ? (size_t)n : TOP_LINE_MAX - 1 - *len;
}

/* One scope's row: rates over secs, gauges now, percentiles of the deltas. */
static void top_row(char *line, size_t *len, const struct admit_result *cur,
		    const struct admit_scope_stat *st, const struct admit_scope_stat *was,
		    double secs)
{
	int64_t d[64];
	size_t nb = st->nwait_buckets, i, c;
	bool have_hist = nb >= 2 && nb <= 64 && cur->nwait_bounds + 1 == nb;

	if (was != NULL && was->nwait_buckets != nb)
		was = NULL; /* another daemon's layout: since start */
	for (i = 0; have_hist && i < nb; i++) {
		d[i] = st->wait_buckets[i] - (was != NULL ? was->wait_buckets[i] : 0);
		if (d[i] < 0)
			d[i] = 0;
	}
	for (c = 0; c < TOP_NCOLS; c++) {
		const struct top_col *col = &top_cols[c];
		bool above;
		double v;
		switch (col->kind) {
		case TC_WAITING:
			top_cell(line, len, " %*lld", TOP_CELL_WIDTH, (long long)st->waiting);
			break;
		case TC_LEASES:
			top_cell(line, len, " %*lld", TOP_CELL_WIDTH, (long long)st->leases);
			break;
		case TC_QUANTILE:
			v = have_hist ? top_quantile(d, nb, cur->wait_bounds_ms, col->q, &above)
				      : -1;
			if (v < 0)
				top_cell(line, len, " %*s", TOP_CELL_WIDTH, "-");
			else if (above)
				top_cell(line, len, " %*s%.0f", TOP_CELL_WIDTH - 6, ">", v);
			else
				top_cell(line, len, " %*.0f", TOP_CELL_WIDTH, v);
			break;
		default:
			if (secs <= 0) {
				top_cell(line, len, " %*s", TOP_CELL_WIDTH, "-");
				break;
			}
			v = (double)(top_counter(st, col) - top_counter(was, col));
			top_cell(line, len, " %*.1f", TOP_CELL_WIDTH, v > 0 ? v / secs : 0.0);
			break;
		}
	}
}

/*
 * The adaptive scopes' learned amounts, one line each after the table (none
 * when no scope adapts): read from the status reply's raw line, where each
 * such scope has "adaptive" (the mean over the daemon's keys).
 */
static void top_adaptive(const struct admit_result *cur, int w,
			 void (*emit)(void *ctx, const char *line), void *ctx)
{
	char line[TOP_LINE_MAX];
	json_t *root, *scopes, *sc, *ad;
	const char *name;
	bool head = false;
	size_t len;

	if (cur->raw == NULL || (root = json_loads(cur->raw, 0, NULL)) == NULL)
		return;
	scopes = json_object_get(root, "scopes");
	json_object_foreach (scopes, name, sc) {
		long long milli, ceil, keys;
		ad = json_object_get(sc, "adaptive");
		if (!json_is_object(ad))
			continue;
		milli = (long long)json_integer_value(json_object_get(ad, "amount_milli"));
		ceil = (long long)json_integer_value(json_object_get(ad, "ceiling"));
		keys = (long long)json_integer_value(json_object_get(ad, "keys"));
		if (!head) {
			len = 0;
			top_cell(line, &len, "%-*s %s", w, "ADAPTIVE",
				 "amount (mean over this daemon's keys) of the ceiling");
			emit(ctx, line);
			head = true;
		}
		len = 0;
		top_cell(line, &len, "%-*.*s %lld.%01lld of %lld (%lld keys)", w, w, name,
			 milli / 1000, (milli % 1000) / 100, ceil, keys);
		emit(ctx, line);
	}
	json_decref(root);
}

/*
 * The keys with the most waiters on the daemon, a line each after the
 * table (none when nothing waits): the status reply's "contended", its
 * scope, key (cut at TOP_KEY_MAX), class, waiters and tenant flows.
 */
static void top_contended(const struct admit_result *cur, int w,
			  void (*emit)(void *ctx, const char *line), void *ctx)
{
	char line[TOP_LINE_MAX];
	json_t *root, *list, *e;
	size_t i, len;

	if (cur->raw == NULL || (root = json_loads(cur->raw, 0, NULL)) == NULL)
		return;
	list = json_object_get(root, "contended");
	json_array_foreach (list, i, e) {
		const char *key = json_string_value(json_object_get(e, "key"));
		const char *cls = json_string_value(json_object_get(e, "class"));
		if (i == 0) {
			len = 0;
			top_cell(line, &len, "%-*s %-*s %-12s %7s %7s", w, "CONTENDED", TOP_KEY_MAX,
				 "KEY", "CLASS", "WAITING", "TENANTS");
			emit(ctx, line);
		}
		len = 0;
		top_cell(line, &len, "%-*.*s %-*.*s %-12.12s %7lld %7lld", w, w,
			 json_string_value(json_object_get(e, "scope")), TOP_KEY_MAX, TOP_KEY_MAX,
			 key != NULL ? key : "?", cls != NULL && cls[0] != '\0' ? cls : "-",
			 (long long)json_integer_value(json_object_get(e, "waiters")),
			 (long long)json_integer_value(json_object_get(e, "tenants")));
		emit(ctx, line);
	}
	json_decref(root);
}

void top_table(const struct admit_result *cur, const struct admit_result *prev,
	       void (*emit)(void *ctx, const char *line), void *ctx)
{
	char line[TOP_LINE_MAX];
	int64_t now = cur->uptime_ms >= 0 ? cur->uptime_ms : cur->uptime_s * 1000, then = 0;
	int w = 5; /* "SCOPE" */
	size_t i, len;

	if (prev != NULL) {
		then = prev->uptime_ms >= 0 ? prev->uptime_ms : prev->uptime_s * 1000;
		if (then > now) /* the daemon restarted in between */
			prev = NULL, then = 0;
	}
	for (i = 0; i < cur->nscopes; i++)
		if ((int)strlen(cur->scopes[i].name) > w)
			w = (int)strlen(cur->scopes[i].name);
	if (w > TOP_SCOPE_MAX)
		w = TOP_SCOPE_MAX;
	len = 0;
	top_cell(line, &len, "%-*s", w, "SCOPE");
	for (i = 0; i < TOP_NCOLS; i++)
		top_cell(line, &len, " %*s", TOP_CELL_WIDTH, top_cols[i].head);
	emit(ctx, line);
	for (i = 0; i < cur->nscopes; i++) {
		const struct admit_scope_stat *st = &cur->scopes[i];
		len = 0;
		top_cell(line, &len, "%-*.*s", w, w, st->name);
		top_row(line, &len, cur, st, top_scope(prev, st->name),
			(double)(now - then) / 1000.0);
		emit(ctx, line);
	}
	top_adaptive(cur, w < 8 ? 8 : w, emit, ctx);
	top_contended(cur, w < 9 ? 9 : w, emit, ctx);
}

/* ---- the live view ---- */

static volatile sig_atomic_t top_signal;

static void top_on_signal(int sig)
{
	top_signal = sig;
}

static const int top_sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
#define TOP_NSIGS (sizeof(top_sigs) / sizeof(top_sigs[0]))

struct top_screen {
	bool tty;  /* stdout is a terminal: redraw in place */
	int width; /* its columns; lines are cut there */
};

static void top_emit(void *ctx, const char *line)
{
	const struct top_screen *s = ctx;

	if (s->tty) /* erase what the previous frame left right of it */
		printf("%.*s\033[K\n", s->width > 0 ? s->width : INT_MAX, line);
	else
		printf("%s\n", line);
}

static int64_t top_now_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void top_frame(const struct admit_result *cur, const struct admit_result *prev,
		      int64_t interval_ms)
{
	struct top_screen s = { .tty = isatty(STDOUT_FILENO) == 1, .width = 0 };
	struct winsize ws;
	char head[TOP_LINE_MAX];

	if (s.tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0)
		s.width = ws.ws_col;
	if (s.tty)
		printf("\033[H");
	snprintf(head, sizeof(head),
		 "admitd %s, up %llds, backend %s, %lld connections; every %.1fs (q quits)",
		 cur->version ? cur->version : "?", (long long)cur->uptime_s,
		 cur->backend ? cur->backend : "?", (long long)cur->connections,
		 (double)interval_ms / 1000.0);
	top_emit(&s, head);
	top_emit(&s, prev != NULL ? "rates and wait percentiles over the last interval"
				  : "rates and wait percentiles since the daemon started");
	top_table(cur, prev, top_emit, &s);
	if (s.tty)
		printf("\033[J");
	else
		printf("\n");
	fflush(stdout);
}

/* Wait up to ms for `q` on fd; true when it came (or a signal did). */
static bool top_wait_key(int *fd, int64_t ms)
{
	int64_t until = top_now_ms() + ms, left;
	struct pollfd p;
	char buf[64];
	ssize_t n;

	while (top_signal == 0 && (left = until - top_now_ms()) > 0) {
		p.fd = *fd;
		p.events = POLLIN;
		p.revents = 0;
		if (poll(&p, 1, (int)left) <= 0)
			continue; /* timeout, or EINTR: the loop checks the time and signals */
		n = read(*fd, buf, sizeof(buf));
		if (n <= 0 && !(n < 0 && errno == EINTR))
			*fd = -1; /* end of input: poll only sleeps from here on */
		else if (n > 0 && (memchr(buf, 'q', (size_t)n) || memchr(buf, 'Q', (size_t)n)))
			return true;
	}
	return top_signal != 0;
}

int top_run(struct admit *a, int64_t interval_ms, struct admit_result *fail)
{
	struct sigaction sa, old[TOP_NSIGS];
	struct admit_result prev, cur;
	struct termios saved, raw;
	bool have_prev = false, is_raw = false, tty = isatty(STDOUT_FILENO) == 1;
	int fd = STDIN_FILENO, rc = 0;
	size_t i;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = top_on_signal; /* no SA_RESTART: poll returns at once */
	if (sigemptyset(&sa.sa_mask) != 0)
		return -1;
	top_signal = 0;
	for (i = 0; i < TOP_NSIGS; i++)
		if (sigaction(top_sigs[i], &sa, &old[i]) != 0)
			old[i].sa_handler = SIG_DFL;
	if (isatty(fd) == 1 && tcgetattr(fd, &saved) == 0) {
		raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		is_raw = tcsetattr(fd, TCSANOW, &raw) == 0;
	}
	if (tty)
		printf("\033[?1049h\033[?25l\033[2J"); /* alternate screen, no cursor */
	for (;;) {
		if (admit_status(a, &cur) != ADMIT_OK) {
			*fail = cur;
			rc = -1;
			break;
		}
		top_frame(&cur, have_prev ? &prev : NULL, interval_ms);
		if (have_prev)
			admit_result_free(&prev);
		prev = cur;
		have_prev = true;
		if (top_wait_key(&fd, interval_ms))
			break;
	}
	if (tty)
		printf("\033[?25h\033[?1049l");
	fflush(stdout);
	if (is_raw && tcsetattr(STDIN_FILENO, TCSANOW, &saved) != 0)
		perror("admit: top: restoring the terminal");
	for (i = 0; i < TOP_NSIGS; i++)
		if (sigaction(top_sigs[i], &old[i], NULL) != 0)
			perror("admit: top: sigaction");
	if (have_prev)
		admit_result_free(&prev);
	if (rc == 0 && top_signal != 0)
		rc = 128 + top_signal;
	return rc;
}
