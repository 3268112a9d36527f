/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_cli.c - the `admit` command: libadmit for shell scripts.
 *
 * Owns: the subcommand table (name, usage, arity, allowed options, handler,
 * smtpctl/tmux style), the option table (an option may repeat), parsing
 * durations, token lists and an override's rule amounts,
 * the connect timeout (--connect-timeout, else $ADMITD_CONNECT_TIMEOUT), the
 * exit-code table (sysexits style, printed by --help), the status and
 * inspect tables, and `admit run`'s fork/exec/wait with signal forwarding
 * (and CMD killed by the kernel when admit dies, PR_SET_PDEATHSIG).
 * The activity table of status and `admit top` are admit_top.c's.
 * It owns no protocol knowledge: every exchange goes through admit.h, whose
 * handle connects on the first call (so the wait for a daemon that is still
 * starting counts against that call's budget).
 */

#include "admit.h"
#include "admit_top.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* sysexits.h values, spelled out so the table below is the one reference */
enum cli_exit {
	EXIT_ADMITTED = 0,
	EXIT_NOT_HELD = 0,
	EXIT_USAGE = 64,       /* EX_USAGE */
	EXIT_REJECTED = 65,    /* EX_DATAERR */
	EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE */
	EXIT_SOFTWARE = 70,    /* EX_SOFTWARE */
	EXIT_TEMPFAIL = 75,    /* EX_TEMPFAIL */
	EXIT_PROTOCOL = 76,    /* EX_PROTOCOL */
	EXIT_NOPERM = 77,      /* EX_NOPERM */
	EXIT_CONFIG = 78,      /* EX_CONFIG */
	EXIT_BUDGET = 79,      /* past sysexits: admit's own */
	EXIT_TIMEOUT = 80,
	EXIT_EXCEEDS = 81,
	EXIT_CANNOT_EXEC = 126, /* run: as sh(1) */
	EXIT_NOT_FOUND = 127,
};

static const struct cli_exit_doc {
	int code;
	const char *meaning;
} cli_exit_docs[] = {
	{ 0, "admitted / done (release prints \"released\" or \"not held\")" },
	{ 64, "bad usage (EX_USAGE)" },
	{ 65, "the daemon rejected the request: bad_request, unknown_op, line_too_long "
	      "(EX_DATAERR)" },
	{ 69, "daemon unreachable or connection lost, shutting_down, unavailable "
	      "(EX_UNAVAILABLE)" },
	{ 70, "internal error, out of memory (EX_SOFTWARE)" },
	{ 75, "limited or too_many_waiters: try again later; the retry-after in seconds "
	      "is printed on stdout (EX_TEMPFAIL)" },
	{ 76, "the daemon's reply was not understood (EX_PROTOCOL)" },
	{ 77, "forbidden: the daemon does not serve this user (allow_uids, allow_gids) "
	      "(EX_NOPERM)" },
	{ 78, "unknown scope (EX_CONFIG)" },
	{ 79, "budget exceeded: the wait needed is longer than --timeout; retry-after "
	      "printed on stdout" },
	{ 80, "timeout: waited the whole --timeout" },
	{ 81, "exceeds_limit: no wait can admit it: the request asks more than the limit\n"
	      "       holds; do not retry (the limit is on stderr)" },
	{ 126, "run: the command could not be executed" },
	{ 127, "run: the command was not found" },
	{ -1, "run: otherwise the command's own exit status, 128+N if killed by signal N" },
	{ -1, "run: the two can collide: 64-81, 126 and 127 may be admit's own or the\n"
	      "  command's (a command that exits 75 looks limited); when that matters,\n"
	      "  have the command record its status itself, or use acquire + release" },
};

enum cli_opt_id {
	O_SOCKET,
	O_CONNECT_TIMEOUT,
	O_URL,
	O_CLASS,
	O_COST,
	O_TIMEOUT,
	O_DETACH,
	O_TOKENS,
	O_RESERVE,
	O_JSON,
	O_INTERVAL,
	O_OUTCOME,
	O_LIMITED_EXIT,
	O_TTL,
	O_MIN_DELAY,
	O_RULE,
	O_HELP,
	O__COUNT
};

#define OPT(x)	 (1u << (x))
#define ACQ_OPTS (OPT(O_URL) | OPT(O_CLASS) | OPT(O_COST) | OPT(O_TIMEOUT) | OPT(O_RESERVE))
/* options every command takes */
#define ANY_OPTS (OPT(O_SOCKET) | OPT(O_CONNECT_TIMEOUT) | OPT(O_HELP))

static const struct cli_opt {
	const char *name;
	bool has_arg;
	const char *help;
	bool repeats; /* each use adds a value (cli_args.multi), up to CLI_MAX_MULTI */
} cli_opts[O__COUNT] = {
	[O_SOCKET] = { "socket", true,
		       "PATH   admitd's socket (else $ADMITD_SOCKET, else " ADMIT_DEFAULT_SOCKET
		       ")" },
	[O_CONNECT_TIMEOUT] = { "connect-timeout", true,
				"D  wait this long for a daemon that is not up yet (socket\n"
				"                    missing or refused; default 5s, else "
				"$ADMITD_CONNECT_TIMEOUT;\n"
				"                    0: fail at once), never longer than "
				"--timeout" },
	[O_URL] = { "url", true, "URL       key on the URL's host (instead of KEY)" },
	[O_CLASS] = { "class", true, "C       the scope's class to charge" },
	[O_COST] = { "cost", true,
		     "N        requests this admission counts for (default 1; 0 is free)" },
	[O_TIMEOUT] = { "timeout", true,
			"D     wait budget: 250ms, 5s, 1m (bare number: "
			"seconds; 0: do not wait)" },
	[O_DETACH] = { "detach", false, "       accepted; acquire and try always detach" },
	[O_TOKENS] = { "tokens", true, "LIST   post-hoc meters: input=300,output=200" },
	[O_RESERVE] = { "reserve", true,
			"LIST  token meters charged at acquire, settled at release: "
			"output=500" },
	[O_JSON] = { "json", false, "         status, inspect: print the raw reply" },
	[O_INTERVAL] = { "interval", true, "D    top: refresh every D (default 1s)" },
	[O_OUTCOME] = { "outcome", true,
			"O     release: how the upstream call went: ok, limited (429, or\n"
			"                    503 with Retry-After) or error" },
	[O_LIMITED_EXIT] = { "limited-exit", true,
			     "N run: CMD exiting N means the upstream limited (outcome\n"
			     "                    limited); 0 is ok, any other status error" },
	[O_TTL] = { "ttl", true,
		    "D         override: how long it holds (1h, 90m; bare number: seconds;\n"
		    "                    at most 30 days, 720h)" },
	[O_MIN_DELAY] = { "min-delay", true, "D   override: the key's min_delay (0 allowed)" },
	[O_RULE] = { "rule", true,
		     "RULE=N   override: the rule's amount (RULE: its name, or its\n"
		     "                    0-based index in the scope); repeat for more rules",
		     true },
	[O_HELP] = { "help", false, "         this help" },
};

#define CLI_MAX_POS    4
#define CLI_MAX_TOKENS ADMIT_MAX_TOKENS
#define CLI_MAX_MULTI  ADMIT_MAX_TOKENS /* values of a repeated option */
/* The protocol's bounds, checked here so that a refusal is worded in the
 * units given on the command line, not in the daemon's milliseconds. */
#define CLI_MAX_COST	1000000000LL
#define CLI_MAX_WAIT_MS (24LL * 3600 * 1000)
#define CLI_MAX_TTL_MS	(30LL * 24 * 3600 * 1000) /* an override's */

struct cli_args {
	const char *val[O__COUNT];
	bool set[O__COUNT];
	const char *pos[CLI_MAX_POS];
	int npos;
	const char *extra; /* the first positional past CLI_MAX_POS, if any */
	char **cmd;	   /* run: argv after "--" */
	/* every value of the repeating option (cli_opt.repeats; one so far) */
	const char *multi[CLI_MAX_MULTI];
	int nmulti;
};

struct cli_cmd {
	const char *name;
	const char *usage;
	int minpos, maxpos;
	unsigned opts;
	bool takes_cmd;
	int (*fn)(struct admit *, const struct cli_args *);
	const char *help;
};

static int cmd_acquire(struct admit *, const struct cli_args *);
static int cmd_try(struct admit *, const struct cli_args *);
static int cmd_once(struct admit *, const struct cli_args *);
static int cmd_release(struct admit *, const struct cli_args *);
static int cmd_penalize(struct admit *, const struct cli_args *);
static int cmd_run(struct admit *, const struct cli_args *);
static int cmd_status(struct admit *, const struct cli_args *);
static int cmd_ping(struct admit *, const struct cli_args *);
static int cmd_reset(struct admit *, const struct cli_args *);
static int cmd_inspect(struct admit *, const struct cli_args *);
static int cmd_override(struct admit *, const struct cli_args *);
static int cmd_top(struct admit *, const struct cli_args *);

#define RUN_USAGE "SCOPE KEY [options] -- CMD ..."

static const struct cli_cmd cli_cmds[] = {
	{ "acquire",
	  "SCOPE [KEY] [--url URL] [--class C] [--cost N] [--timeout D] [--reserve LIST] "
	  "[--detach]",
	  1, 2, ACQ_OPTS | OPT(O_DETACH), false, cmd_acquire,
	  "wait for admission, print the lease (always detached: it outlives this\n"
	  "\t\tcommand; give it to `admit release`, else it expires at lease_ttl)" },
	{ "try", "SCOPE [KEY] [--url URL] [--class C] [--cost N] [--reserve LIST]", 1, 2,
	  ACQ_OPTS & ~OPT(O_TIMEOUT), false, cmd_try,
	  "admit now or exit 75 printing the retry-after (seconds); the lease\n"
	  "\t\tis printed and detached like acquire's" },
	{ "once", "SCOPE [KEY] [--url URL] [--class C] [--cost N] [--timeout D]", 1, 2,
	  ACQ_OPTS & ~OPT(O_RESERVE), false, cmd_once,
	  "wait for one admission with nothing to release (a scope that only\n"
	  "\t\tlimits rates); prints nothing, exits 0 when admitted, else as try" },
	{ "release", "LEASE [--tokens input=300,output=200] [--outcome ok|limited|error]", 1, 1,
	  OPT(O_TOKENS) | OPT(O_OUTCOME), false, cmd_release,
	  "release a lease; prints \"released\" or \"not held\"" },
	{ "penalize", "SCOPE [KEY] [--url URL] RETRY_AFTER", 2, 3, OPT(O_URL), false, cmd_penalize,
	  "hold the key back: a duration (30s, 500ms) or a Retry-After header\n"
	  "\t\tvalue as is (\"120\" seconds, or an HTTP-date); no KEY or --url:\n"
	  "\t\tthe scope's default key (reset and inspect alike)" },
	{ "run",
	  "SCOPE [KEY] [--url URL] [--class C] [--cost N] [--timeout D] [--reserve LIST] "
	  "[--limited-exit N] -- CMD [ARG...]",
	  1, 2, ACQ_OPTS | OPT(O_LIMITED_EXIT), true, cmd_run,
	  "acquire, run CMD, release when it ends with CMD's outcome (0: ok,\n"
	  "\t\t--limited-exit N: limited, else error); exit with CMD's status;\n"
	  "\t\tSIGINT/SIGTERM/SIGHUP/SIGQUIT are passed on to CMD" },
	{ "reset", "SCOPE [KEY] [--url URL]", 1, 2, OPT(O_URL), false, cmd_reset,
	  "clear the key's penalty and pacing (on every daemon); prints \"reset\"" },
	{ "inspect", "SCOPE [KEY] [--url URL] [--class C] [--json]", 1, 2,
	  OPT(O_URL) | OPT(O_CLASS) | OPT(O_JSON), false, cmd_inspect,
	  "where the key stands, one line per item: penalty, pacing, leases,\n"
	  "\t\tquota, each rule's remaining units (--json: the raw reply)" },
	{ "override", "SCOPE [KEY] [--url URL] --ttl D [--min-delay D] [--rule RULE=N]...", 1, 2,
	  OPT(O_URL) | OPT(O_TTL) | OPT(O_MIN_DELAY) | OPT(O_RULE), false, cmd_override,
	  "for --ttl, replace the key's min_delay and rule amounts (on every\n"
	  "\t\tdaemon; a new override replaces the last, reset lifts it); within\n"
	  "\t\tthe scope's override_max when it loosens; prints \"override\"" },
	{ "status", "[--json]", 0, 0, OPT(O_JSON), false, cmd_status,
	  "top's table once (since the daemon started), then the counters\n"
	  "\t\tas tables (--json: the raw reply)" },
	{ "top", "[--interval D]", 0, 0, OPT(O_INTERVAL), false, cmd_top,
	  "a live view, one row per scope: admissions/s, refusals/s by\n"
	  "\t\treason, waiters, leases, wait p50/p99 of the interval; q quits" },
	{ "ping", "", 0, 0, 0, false, cmd_ping, "exit 0 when the daemon answers" },
};

#define NCMDS (sizeof(cli_cmds) / sizeof(cli_cmds[0]))

static void cli_usage(FILE *out)
{
	size_t i;

	fprintf(out, "usage: admit [--socket PATH] [--connect-timeout D] COMMAND [ARGS...]\n\n"
		     "commands:\n");
	for (i = 0; i < NCMDS; i++)
		fprintf(out, "  admit %s %s\n\t\t%s\n", cli_cmds[i].name, cli_cmds[i].usage,
			cli_cmds[i].help);
	fprintf(out, "\noptions:\n");
	for (i = 0; i < O__COUNT; i++)
		fprintf(out, "  --%s %s\n", cli_opts[i].name, cli_opts[i].help);
	fprintf(out, "\nexit status:\n");
	for (i = 0; i < sizeof(cli_exit_docs) / sizeof(cli_exit_docs[0]); i++) {
		if (cli_exit_docs[i].code < 0)
			fprintf(out, "  %s\n", cli_exit_docs[i].meaning);
		else
			fprintf(out, "  %3d  %s\n", cli_exit_docs[i].code,
				cli_exit_docs[i].meaning);
	}
}

static int cli_usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "admit: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(admit --help lists the commands)\n");
	return EXIT_USAGE;
}

/* The exit status a failed call maps to. */
static int cli_exit_code(int err)
{
	switch (err) {
	case ADMIT_OK: return EXIT_ADMITTED;
	case ADMIT_E_LIMITED:
	case ADMIT_E_TOO_MANY_WAITERS: return EXIT_TEMPFAIL;
	case ADMIT_E_BUDGET_EXCEEDED: return EXIT_BUDGET;
	case ADMIT_E_TIMEOUT: return EXIT_TIMEOUT;
	case ADMIT_E_EXCEEDS_LIMIT: return EXIT_EXCEEDS;
	case ADMIT_E_UNKNOWN_SCOPE: return EXIT_CONFIG;
	case ADMIT_E_BAD_REQUEST:
	case ADMIT_E_UNKNOWN_OP:
	case ADMIT_E_LINE_TOO_LONG:
	case ADMIT_E_ARG: return EXIT_REJECTED;
	case ADMIT_E_SHUTTING_DOWN:
	case ADMIT_E_UNAVAILABLE:
	case ADMIT_E_CONNECT:
	case ADMIT_E_IO:
	case ADMIT_E_DEADLINE: return EXIT_UNAVAILABLE;
	case ADMIT_E_PROTO: return EXIT_PROTOCOL;
	case ADMIT_E_FORBIDDEN: return EXIT_NOPERM;
	default: return EXIT_SOFTWARE;
	}
}

/*
 * Report a failed call on stderr (and a retry-after, in seconds, on stdout
 * so `sleep "$(admit try ...)"` works); returns the exit status.
 */
static int cli_fail(const char *what, const struct admit_result *r)
{
	char *tscope = NULL, *tkey = NULL;
	int64_t tix;

	fprintf(stderr, "admit: %s: %s", what, admit_strerror(r->err));
	/* the daemon's message for a code is often just the code's meaning */
	if (r->message && strcmp(r->message, admit_strerror(r->err)) != 0 &&
	    (r->err < 0 || strcmp(r->message, admit_err_msg(r->err)) != 0))
		fprintf(stderr, ": %s", r->message);
	if (r->rule && (r->message == NULL || strstr(r->message, r->rule) == NULL))
		fprintf(stderr, " by \"%s\"", r->rule);
	tix = admit_result_target(r, &tscope, &tkey);
	if (tix >= 0)
		fprintf(stderr, " (target %lld: scope %s key %s)", (long long)tix,
			tscope ? tscope : "?", tkey ? tkey : "?");
	free(tscope);
	free(tkey);
	if (admit_result_remaining(r) >= 0)
		fprintf(stderr, "; remaining %lld, full again in %lld ms",
			(long long)admit_result_remaining(r), (long long)admit_result_reset_ms(r));
	if (r->err == ADMIT_E_EXCEEDS_LIMIT && r->limit >= 0)
		fprintf(stderr, "; limit %lld: do not retry", (long long)r->limit);
	if (r->retry_after_ms >= 0) {
		fprintf(stderr, "; retry after %lld.%03llds", (long long)(r->retry_after_ms / 1000),
			(long long)(r->retry_after_ms % 1000));
		printf("%lld.%03lld\n", (long long)(r->retry_after_ms / 1000),
		       (long long)(r->retry_after_ms % 1000));
	}
	fprintf(stderr, "\n");
	return cli_exit_code(r->err);
}

/*
 * Parse a duration into ms: a number (decimals allowed) with a unit ms, s,
 * m or h; a bare number is seconds when bare_ok. Any nonzero duration is
 * at least 1 ms (0 alone means "do not wait"). Returns 0 or -1.
 */
static int cli_duration(const char *s, bool bare_ok, int64_t *ms)
{
	static const struct {
		const char *unit;
		double ms;
	} units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 } };
	const char *unit;
	char *end;
	double v;
	size_t i;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || !isfinite(v) || v < 0)
		return -1;
	unit = *end == '\0' && bare_ok ? "s" : end;
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(unit, units[i].unit) == 0 && v * units[i].ms < 9e15) {
			*ms = (int64_t)llround(v * units[i].ms);
			/* 0.0001s is a (tiny) wait, not "do not wait" */
			if (*ms == 0 && v > 0)
				*ms = 1;
			return 0;
		}
	}
	return -1;
}

static int cli_int(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

/* "input=300,output=200" into tk (names point into buf, which the caller frees). */
static int cli_tokens(char *buf, struct admit_token *tk, size_t *n)
{
	char *save = NULL, *item, *eq;

	*n = 0;
	for (item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		eq = strchr(item, '=');
		if (eq == NULL || eq == item || *n == CLI_MAX_TOKENS)
			return -1;
		*eq = '\0';
		tk[*n].name = item;
		if (cli_int(eq + 1, &tk[*n].count) < 0)
			return -1;
		(*n)++;
	}
	return 0;
}

/* An acquire's request and the storage its --reserve list points into. */
struct cli_acq {
	struct admit_req rq;
	struct admit_token reserve[CLI_MAX_TOKENS];
	char *buf; /* the --reserve copy the names point into; cli_acq_free frees it */
};

static void cli_acq_free(struct cli_acq *q)
{
	free(q->buf);
	q->buf = NULL;
}

/* SCOPE [KEY] [--url ...] into q->rq; the usage error status or 0. */
static int cli_req(const struct cli_args *ar, struct cli_acq *q)
{
	struct admit_req *rq = &q->rq;
	int64_t cost;

	rq->scope = ar->pos[0];
	rq->key = ar->npos > 1 ? ar->pos[1] : NULL;
	rq->url = ar->val[O_URL];
	rq->cls = ar->val[O_CLASS];
	if (rq->key && rq->url)
		return cli_usage_error("%s: give KEY or --url, not both", rq->key);
	if (ar->set[O_COST]) {
		if (cli_int(ar->val[O_COST], &cost) < 0)
			return cli_usage_error("--cost %s: want an integer >= 0", ar->val[O_COST]);
		if (cost > CLI_MAX_COST)
			return cli_usage_error("--cost %s: at most 1000000000", ar->val[O_COST]);
		rq->cost = cost == 0 ? ADMIT_COST_ZERO : cost;
	}
	if (ar->set[O_TIMEOUT] && cli_duration(ar->val[O_TIMEOUT], true, &rq->timeout_ms) < 0)
		return cli_usage_error("--timeout %s: want a duration like 250ms, 5s, 1m",
				       ar->val[O_TIMEOUT]);
	if (ar->set[O_TIMEOUT] && rq->timeout_ms > CLI_MAX_WAIT_MS)
		return cli_usage_error("--timeout %s: at most 24h (86400s)", ar->val[O_TIMEOUT]);
	if (ar->set[O_RESERVE]) {
		q->buf = strdup(ar->val[O_RESERVE]);
		if (q->buf == NULL) {
			fprintf(stderr, "admit: out of memory\n");
			return EXIT_SOFTWARE;
		}
		if (cli_tokens(q->buf, q->reserve, &rq->nreserve) < 0 || rq->nreserve == 0)
			return cli_usage_error("--reserve %s: want NAME=COUNT[,NAME=COUNT...]",
					       ar->val[O_RESERVE]);
		rq->reserve = q->reserve;
	}
	return 0;
}

/* acquire and try: both detach and print the lease; once: no lease at all. */
static int cli_take(struct admit *a, const struct cli_args *ar, bool wait, bool lease)
{
	struct cli_acq q = { .rq = ADMIT_REQ_INIT };
	struct admit_req rq;
	struct admit_result r;
	int rc;

	rc = cli_req(ar, &q);
	if (rc != 0) {
		cli_acq_free(&q);
		return rc;
	}
	rq = q.rq;
	rq.detach = lease;
	if (!lease)
		admit_once(a, &rq, &r);
	else if (wait)
		admit_acquire(a, &rq, &r);
	else
		admit_try(a, &rq, &r);
	if (r.err == ADMIT_OK && (r.lease == NULL) == lease)
		r.err = ADMIT_E_PROTO;
	if (r.err == ADMIT_OK) {
		if (lease)
			printf("%s\n", r.lease);
		if (r.shadow_limited)
			fprintf(stderr, "admit: shadow scope: would have been limited%s%s\n",
				r.rule ? " by " : "", r.rule ? r.rule : "");
	}
	rc = r.err == ADMIT_OK ? EXIT_ADMITTED
			       : cli_fail(!lease ? "once"
					  : wait ? "acquire"
						 : "try",
					  &r);
	admit_result_free(&r);
	cli_acq_free(&q);
	return rc;
}

static int cmd_acquire(struct admit *a, const struct cli_args *ar)
{
	return cli_take(a, ar, true, true);
}

static int cmd_try(struct admit *a, const struct cli_args *ar)
{
	return cli_take(a, ar, false, true);
}

static int cmd_once(struct admit *a, const struct cli_args *ar)
{
	return cli_take(a, ar, true, false);
}

static int cmd_release(struct admit *a, const struct cli_args *ar)
{
	struct admit_token tk[CLI_MAX_TOKENS];
	struct admit_result r;
	char *buf = NULL;
	size_t n = 0;
	int rc;

	if (ar->set[O_TOKENS]) {
		buf = strdup(ar->val[O_TOKENS]);
		if (buf == NULL)
			return EXIT_SOFTWARE;
		if (cli_tokens(buf, tk, &n) < 0) {
			free(buf);
			return cli_usage_error("--tokens %s: want NAME=COUNT[,NAME=COUNT...]",
					       ar->val[O_TOKENS]);
		}
	}
	if (ar->set[O_OUTCOME] && strcmp(ar->val[O_OUTCOME], "ok") != 0 &&
	    strcmp(ar->val[O_OUTCOME], "limited") != 0 &&
	    strcmp(ar->val[O_OUTCOME], "error") != 0) {
		free(buf);
		return cli_usage_error("--outcome %s: want ok, limited or error",
				       ar->val[O_OUTCOME]);
	}
	admit_release_outcome(a, ar->pos[0], tk, n, ar->val[O_OUTCOME], &r);
	free(buf);
	if (r.err == ADMIT_OK)
		printf("%s\n", r.held ? "released" : "not held");
	rc = r.err == ADMIT_OK ? (r.held ? EXIT_ADMITTED : EXIT_NOT_HELD) : cli_fail("release", &r);
	admit_result_free(&r);
	return rc;
}

static int cmd_penalize(struct admit *a, const struct cli_args *ar)
{
	const char *key = NULL, *hold;
	struct admit_result r;
	int64_t ms = -1;
	int rc;

	if (ar->npos == 3 && ar->val[O_URL] != NULL)
		return cli_usage_error("%s: give KEY or --url, not both", ar->pos[1]);
	else if (ar->npos == 3)
		key = ar->pos[1];
	/* SCOPE RETRY_AFTER: --url's host, or the scope's default key */
	hold = ar->pos[ar->npos - 1];
	/* "30s" is ours to convert; "120" or a date goes as the header value */
	if (cli_duration(hold, false, &ms) < 0)
		ms = -1;
	else if (ms > CLI_MAX_WAIT_MS)
		return cli_usage_error("%s: a penalty is at most 24h (86400s)", hold);
	admit_penalize(a, ar->pos[0], key, ar->val[O_URL], ms, ms < 0 ? hold : NULL, &r);
	rc = r.err == ADMIT_OK ? EXIT_ADMITTED : cli_fail("penalize", &r);
	admit_result_free(&r);
	return rc;
}

static volatile sig_atomic_t cli_child;
static volatile sig_atomic_t cli_session_leader; /* set before the handler is installed */

/*
 * Pass a signal on to CMD, unless the kernel sent it to our whole process
 * group, CMD included: a terminal's INTR (^C), QUIT (^\) or hangup reach the
 * foreground group with si_code SI_KERNEL (> 0), and forwarding them too
 * would give CMD two SIGINTs for one ^C. Sent by a process (kill(1), a
 * supervisor: SI_USER, SI_QUEUE, SI_TKILL, all <= 0) they reached admit
 * only. The kernel's hangup of a session goes to its leader only: when that
 * is admit, CMD has not seen it.
 */
static void cli_forward(int sig, siginfo_t *si, void *uctx)
{
	(void)uctx;
	if (si != NULL && si->si_code > 0 && sig != SIGTERM &&
	    !(sig == SIGHUP && cli_session_leader))
		return;
	if (cli_child > 0)
		kill((pid_t)cli_child, sig);
}

static const int cli_fwd_sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
#define NFWD (sizeof(cli_fwd_sigs) / sizeof(cli_fwd_sigs[0]))

/*
 * Fork and exec cmd with the forwarded signals blocked across the fork, so a
 * signal never finds the child's pid unset. SIGCHLD is set to its default
 * for admit's waitpid (an ignored SIGCHLD, inherited through exec, has the
 * kernel reap CMD by itself: ECHILD); CMD gets back the disposition admit
 * was started with. Returns the wait status, or -1 after saying on stderr
 * what failed.
 */
static int cli_spawn(char **cmd)
{
	struct sigaction sa = { .sa_sigaction = cli_forward, .sa_flags = SA_SIGINFO | SA_RESTART };
	struct sigaction chld = { .sa_handler = SIG_DFL }, oldchld;
	sigset_t block, old;
	int status, e;
	size_t i;
	pid_t pid, parent;

	cli_session_leader = getsid(0) == getpid();
	sigemptyset(&chld.sa_mask);
	sigaction(SIGCHLD, &chld, &oldchld);
	sigemptyset(&block);
	for (i = 0; i < NFWD; i++)
		sigaddset(&block, cli_fwd_sigs[i]);
	sigprocmask(SIG_BLOCK, &block, &old);
	fflush(NULL);
	parent = getpid();
	pid = fork();
	if (pid == 0) {
		/* The lease dies with admit (its socket closes), so CMD must too:
		 * even a SIGKILLed admit, which forwards nothing. Checked after
		 * the prctl, for an admit that died before it took hold. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
			fprintf(stderr, "admit: run: prctl: %s\n", strerror(errno));
			_exit(EXIT_CANNOT_EXEC);
		}
		if (getppid() != parent)
			_exit(EXIT_CANNOT_EXEC);
		sigaction(SIGCHLD, &oldchld, NULL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		execvp(cmd[0], cmd);
		e = errno;
		fprintf(stderr, "admit: run: %s: %s\n", cmd[0], strerror(e));
		_exit(e == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
	}
	if (pid < 0) {
		e = errno;
		sigprocmask(SIG_SETMASK, &old, NULL);
		fprintf(stderr, "admit: run: fork: %s\n", strerror(e));
		return -1;
	}
	cli_child = pid;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < NFWD; i++)
		sigaction(cli_fwd_sigs[i], &sa, NULL);
	sigprocmask(SIG_SETMASK, &old, NULL);
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			e = errno;
			cli_child = 0;
			fprintf(stderr, "admit: run: waiting for %s (pid %ld): %s\n", cmd[0],
				(long)pid, strerror(e));
			return -1;
		}
	}
	cli_child = 0;
	return status;
}

static int cmd_run(struct admit *a, const struct cli_args *ar)
{
	struct cli_acq q = { .rq = ADMIT_REQ_INIT };
	struct admit_result r;
	const char *outcome;
	int64_t limited_exit = -1;
	char *lease;
	int rc, status;

	if (ar->set[O_LIMITED_EXIT] && (cli_int(ar->val[O_LIMITED_EXIT], &limited_exit) < 0 ||
					limited_exit < 1 || limited_exit > 255))
		return cli_usage_error("--limited-exit %s: want an exit status 1 to 255",
				       ar->val[O_LIMITED_EXIT]);
	rc = cli_req(ar, &q);
	if (rc != 0) {
		cli_acq_free(&q);
		return rc;
	}
	/* not detached: if admit itself dies, closing the socket releases */
	admit_acquire(a, &q.rq, &r);
	cli_acq_free(&q);
	if (r.err != ADMIT_OK || r.lease == NULL) {
		if (r.err == ADMIT_OK)
			r.err = ADMIT_E_PROTO;
		rc = cli_fail("run", &r);
		admit_result_free(&r);
		return rc;
	}
	lease = r.lease;
	r.lease = NULL;
	admit_result_free(&r);
	status = cli_spawn(ar->cmd);
	if (status < 0) {
		rc = EXIT_SOFTWARE;
	} else if (WIFSIGNALED(status)) {
		rc = 128 + WTERMSIG(status);
	} else {
		rc = WEXITSTATUS(status);
	}
	outcome = status >= 0 && WIFEXITED(status) && rc == 0		   ? "ok"
		  : status >= 0 && WIFEXITED(status) && rc == limited_exit ? "limited"
									   : "error";
	if (admit_release_outcome(a, lease, NULL, 0, outcome, &r) != ADMIT_OK)
		cli_fail("run: release", &r);
	else if (!r.held)
		fprintf(stderr, "admit: run: the lease was no longer held when the command ended "
				"(it expired, or the daemon restarted)\n");
	admit_result_free(&r);
	free(lease);
	return rc;
}

/* A counter for a table: its value, or "-" when the daemon did not send it. */
static void cli_cell(int width, int64_t v)
{
	if (v < 0)
		printf(" %*s", width, "-");
	else
		printf(" %*lld", width, (long long)v);
}

/* "name N, name N, ..." of a status reply's named counters. */
static void cli_counts(const struct admit_count *c, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		printf("%s%s %lld", i ? ", " : "", c[i].name, (long long)c[i].count);
}

/* The columns of `admit status`: header, then the field of each scope. */
#define STATUS_COLUMNS(X)                \
	X("LEASES", leases)              \
	X("WAITING", waiting)            \
	X("ADMITTED", admitted)          \
	X("REFUSED", refused)            \
	X("TIMEOUTS", timeouts)          \
	X("CANCELED", canceled)          \
	X("FALLBACK", fallback_admitted) \
	X("SHADOW", shadow_limited)      \
	X("EXPIRED", expired)            \
	X("WAIT_MS", wait_ms_total)

static void cli_line(void *ctx, const char *line)
{
	(void)ctx;
	printf("%s\n", line);
}

static int cmd_status(struct admit *a, const struct cli_args *ar)
{
	struct admit_result r;
	int w = 5; /* "SCOPE" */
	bool any = false;
	size_t i;
	int rc;

	if (admit_status(a, &r) != ADMIT_OK) {
		rc = cli_fail("status", &r);
		admit_result_free(&r);
		return rc;
	}
	if (ar->set[O_JSON]) {
		printf("%s\n", r.raw);
		admit_result_free(&r);
		return EXIT_ADMITTED;
	}
	printf("admitd %s, up %llds, backend %s\n", r.version ? r.version : "?",
	       (long long)r.uptime_s, r.backend ? r.backend : "?");
	top_table(&r, NULL, cli_line, NULL);
	printf("\ntotals since the daemon started:\n");
	for (i = 0; i < r.nscopes; i++)
		if ((int)strlen(r.scopes[i].name) > w)
			w = (int)strlen(r.scopes[i].name);
	printf("%-*s", w, "SCOPE");
#define STATUS_HEAD(h, f) printf(" %8s", h);
	STATUS_COLUMNS(STATUS_HEAD)
#undef STATUS_HEAD
	printf("\n");
	for (i = 0; i < r.nscopes; i++) {
		printf("%-*s", w, r.scopes[i].name);
#define STATUS_CELL(h, f) cli_cell(8, r.scopes[i].f);
		STATUS_COLUMNS(STATUS_CELL)
#undef STATUS_CELL
		printf("\n");
		any = any || r.scopes[i].nrefusals > 0;
	}
	if (any) {
		printf("\nrefused, by code:\n");
		for (i = 0; i < r.nscopes; i++) {
			if (r.scopes[i].nrefusals == 0)
				continue;
			printf("%-*s ", w, r.scopes[i].name);
			cli_counts(r.scopes[i].refusals, r.scopes[i].nrefusals);
			printf("\n");
		}
	}
	if (r.redis != NULL) {
		printf("\nredis: pods_seen %lld, queued %lld, reconciled %lld, rebooked %lld, "
		       "dropped %lld\n",
		       (long long)r.redis->pods_seen, (long long)r.redis->queued,
		       (long long)r.redis->reconciled, (long long)r.redis->rebooked,
		       (long long)r.redis->dropped);
		printf("redis errors: ");
		if (r.redis->nerrors == 0)
			printf("none");
		cli_counts(r.redis->errors, r.redis->nerrors);
		printf("\n");
	}
	admit_result_free(&r);
	return EXIT_ADMITTED;
}

static int cmd_top(struct admit *a, const struct cli_args *ar)
{
	struct admit_result fail;
	int64_t ms = 1000;
	int rc;

	if (ar->set[O_INTERVAL] && (cli_duration(ar->val[O_INTERVAL], true, &ms) < 0 || ms < 100))
		return cli_usage_error("--interval %s: want a duration of at least 100ms, like 1s",
				       ar->val[O_INTERVAL]);
	memset(&fail, 0, sizeof(fail));
	rc = top_run(a, ms, &fail);
	if (rc == -1) {
		rc = cli_fail("top", &fail);
		admit_result_free(&fail);
	}
	return rc;
}

/* SCOPE [KEY] [--url URL] of reset and inspect: key or url, at most one. */
static int cli_key_args(const struct cli_args *ar, const char **key, const char **url)
{
	*key = ar->npos > 1 ? ar->pos[1] : NULL;
	*url = ar->val[O_URL];
	if (*key && *url)
		return cli_usage_error("%s: give KEY or --url, not both", *key);
	return 0; /* neither: the scope's default key (its conf's `key =`) */
}

static int cmd_reset(struct admit *a, const struct cli_args *ar)
{
	const char *key, *url;
	struct admit_result r;
	int rc;

	rc = cli_key_args(ar, &key, &url);
	if (rc != 0)
		return rc;
	admit_reset(a, ar->pos[0], key, url, &r);
	if (r.err == ADMIT_OK)
		printf("reset\n");
	rc = r.err == ADMIT_OK ? EXIT_ADMITTED : cli_fail("reset", &r);
	admit_result_free(&r);
	return rc;
}

/*
 * --rule RULE=N (each value of the repeated option) into rules; the names
 * point into buf (one copy of all values, the caller frees it). 0 or the
 * usage error status.
 */
static int cli_rule_amounts(const struct cli_args *ar, struct admit_rule_amount *rules, char **buf)
{
	size_t len = 0, off = 0;
	char *item, *eq;
	int i;

	for (i = 0; i < ar->nmulti; i++)
		len += strlen(ar->multi[i]) + 1;
	*buf = malloc(len + 1);
	if (*buf == NULL) {
		fprintf(stderr, "admit: out of memory\n");
		return EXIT_SOFTWARE;
	}
	for (i = 0; i < ar->nmulti; i++) {
		item = strcpy(*buf + off, ar->multi[i]);
		off += strlen(item) + 1;
		eq = strrchr(item, '='); /* the amount follows the last '=' */
		if (eq == NULL || eq == item || cli_int(eq + 1, &rules[i].amount) < 0 ||
		    rules[i].amount < 1 || rules[i].amount > CLI_MAX_COST)
			return cli_usage_error("--rule %s: want RULE=N, N from 1 to 1000000000",
					       ar->multi[i]);
		*eq = '\0';
		rules[i].rule = item;
	}
	return 0;
}

static int cmd_override(struct admit *a, const struct cli_args *ar)
{
	struct admit_rule_amount rules[CLI_MAX_MULTI];
	int64_t ttl_ms, min_delay_ms = -1;
	const char *key, *url;
	struct admit_result r;
	char *buf = NULL;
	int rc;

	rc = cli_key_args(ar, &key, &url);
	if (rc != 0)
		return rc;
	if (!ar->set[O_TTL])
		return cli_usage_error("%s: wants --ttl D (how long the override holds)",
				       "override");
	if (cli_duration(ar->val[O_TTL], true, &ttl_ms) < 0 || ttl_ms < 1)
		return cli_usage_error("--ttl %s: want a duration above 0 like 90s, 1h",
				       ar->val[O_TTL]);
	if (ttl_ms > CLI_MAX_TTL_MS)
		return cli_usage_error("--ttl %s: at most 30 days (720h)", ar->val[O_TTL]);
	if (ar->set[O_MIN_DELAY] && cli_duration(ar->val[O_MIN_DELAY], true, &min_delay_ms) < 0)
		return cli_usage_error("--min-delay %s: want a duration like 500ms, 2s",
				       ar->val[O_MIN_DELAY]);
	if (min_delay_ms > CLI_MAX_WAIT_MS)
		return cli_usage_error("--min-delay %s: at most 24h (86400s)",
				       ar->val[O_MIN_DELAY]);
	if (min_delay_ms < 0 && ar->nmulti == 0)
		return cli_usage_error("%s: wants --min-delay D or --rule RULE=N (what it sets)",
				       "override");
	rc = ar->nmulti > 0 ? cli_rule_amounts(ar, rules, &buf) : 0;
	if (rc == 0) {
		admit_override(a, ar->pos[0], key, url, ttl_ms, min_delay_ms, rules,
			       (size_t)ar->nmulti, &r);
		if (r.err == ADMIT_OK)
			printf("override\n");
		rc = r.err == ADMIT_OK ? EXIT_ADMITTED : cli_fail("override", &r);
		admit_result_free(&r);
	}
	free(buf);
	return rc;
}

static void cli_item(const char *name, int64_t v)
{
	if (v < 0)
		printf("%-11s -\n", name);
	else
		printf("%-11s %lld\n", name, (long long)v);
}

static int cmd_inspect(struct admit *a, const struct cli_args *ar)
{
	const struct admit_inspect *in;
	const char *key, *url;
	struct admit_result r;
	size_t i;
	int rc;

	rc = cli_key_args(ar, &key, &url);
	if (rc != 0)
		return rc;
	if (admit_inspect(a, ar->pos[0], key, url, ar->val[O_CLASS], &r) != ADMIT_OK) {
		rc = cli_fail("inspect", &r);
		admit_result_free(&r);
		return rc;
	}
	if (ar->set[O_JSON]) {
		printf("%s\n", r.raw);
		admit_result_free(&r);
		return EXIT_ADMITTED;
	}
	in = r.inspect;
	printf("%-11s %s\n", "scope", in->scope ? in->scope : ar->pos[0]);
	printf("%-11s %s\n", "key", in->key ? in->key : (key ? key : "?"));
	printf("%-11s %s\n", "backend", r.backend ? r.backend : "?");
	cli_item("penalty_ms", in->penalty_ms);
	cli_item("next_in_ms", in->next_in_ms);
	cli_item("leases", in->leases);
	if (in->has_quota)
		printf("%-11s used %lld, limit %lld, frees_in_ms %lld\n", "quota",
		       (long long)in->quota_used, (long long)in->quota_limit,
		       (long long)in->quota_frees_in_ms);
	for (i = 0; i < in->nrules; i++)
		printf("%-11s \"%s\" remaining %lld, capacity %lld, full_in_ms %lld\n", "rule",
		       in->rules[i].rule ? in->rules[i].rule : "?",
		       (long long)in->rules[i].remaining, (long long)in->rules[i].capacity,
		       (long long)in->rules[i].full_in_ms);
	admit_result_free(&r);
	return EXIT_ADMITTED;
}

static int cmd_ping(struct admit *a, const struct cli_args *ar)
{
	struct admit_result r;
	int rc;

	(void)ar;
	rc = admit_ping(a, &r) == ADMIT_OK ? EXIT_ADMITTED : cli_fail("ping", &r);
	if (rc == EXIT_ADMITTED)
		printf("ok\n");
	admit_result_free(&r);
	return rc;
}

static int cli_find_opt(const char *name, size_t len)
{
	int i;

	for (i = 0; i < O__COUNT; i++)
		if (strlen(cli_opts[i].name) == len && strncmp(cli_opts[i].name, name, len) == 0)
			return i;
	return -1;
}

/*
 * Split argv into options (anywhere before "--"), positionals and, after
 * "--", the command of `run`. Returns 0 or the usage error status.
 */
static int cli_parse(int argc, char **argv, struct cli_args *ar, const char **cmdname)
{
	const char *arg, *eq;
	int i, o;

	for (i = 1; i < argc; i++) {
		arg = argv[i];
		if (strcmp(arg, "--") == 0) {
			ar->cmd = argv + i + 1;
			break;
		}
		if (strcmp(arg, "-h") == 0) {
			ar->set[O_HELP] = true;
			continue;
		}
		if (strncmp(arg, "--", 2) != 0) {
			if (*cmdname == NULL)
				*cmdname = arg;
			else if (ar->npos < CLI_MAX_POS)
				ar->pos[ar->npos++] = arg;
			else if (ar->extra == NULL)
				ar->extra =
				    arg; /* main says what is wrong, once it knows the command */
			continue;
		}
		eq = strchr(arg + 2, '=');
		o = cli_find_opt(arg + 2, eq ? (size_t)(eq - arg - 2) : strlen(arg + 2));
		if (o < 0)
			return cli_usage_error("%s: unknown option", arg);
		ar->set[o] = true;
		if (!cli_opts[o].has_arg) {
			if (eq)
				return cli_usage_error("%s: takes no value", arg);
		} else if (eq) {
			ar->val[o] = eq + 1;
		} else if (i + 1 < argc) {
			ar->val[o] = argv[++i];
		} else {
			return cli_usage_error("%s: wants a value", arg);
		}
		if (cli_opts[o].repeats) {
			if (ar->nmulti == CLI_MAX_MULTI)
				return cli_usage_error("%s: given too many times (at most 16)",
						       arg);
			ar->multi[ar->nmulti++] = ar->val[o];
		}
	}
	return 0;
}

/*
 * The connect timeout: --connect-timeout (a duration, a bare number is
 * seconds, like --timeout), else $ADMITD_CONNECT_TIMEOUT (milliseconds, or
 * a duration with a unit, as libadmit reads it), else libadmit's default
 * (-1 here). 0, or the usage error status.
 */
static int cli_connect_timeout(const struct cli_args *ar, int64_t *ms)
{
	const char *env = getenv("ADMITD_CONNECT_TIMEOUT");
	int64_t v;

	*ms = -1;
	if (ar->set[O_CONNECT_TIMEOUT]) {
		if (cli_duration(ar->val[O_CONNECT_TIMEOUT], true, ms) < 0)
			return cli_usage_error("--connect-timeout %s: want a duration like 250ms, "
					       "5s (0: do not wait)",
					       ar->val[O_CONNECT_TIMEOUT]);
		return 0;
	}
	if (env == NULL || *env == '\0')
		return 0;
	if (cli_int(env, &v) == 0 || cli_duration(env, false, &v) == 0) {
		*ms = v;
		return 0;
	}
	return cli_usage_error("ADMITD_CONNECT_TIMEOUT=%s: want milliseconds or a duration like "
			       "250ms, 5s",
			       env);
}

int main(int argc, char **argv)
{
	struct cli_args ar;
	const char *name = NULL;
	const struct cli_cmd *c = NULL;
	struct admit *a;
	int64_t connect_ms;
	size_t i;
	int o, rc;

	memset(&ar, 0, sizeof(ar));
	rc = cli_parse(argc, argv, &ar, &name);
	if (rc != 0)
		return rc;
	if (ar.set[O_HELP]) {
		cli_usage(stdout);
		return 0;
	}
	if (name == NULL) {
		cli_usage(stderr);
		return EXIT_USAGE;
	}
	for (i = 0; i < NCMDS; i++)
		if (strcmp(cli_cmds[i].name, name) == 0)
			c = &cli_cmds[i];
	if (c == NULL)
		return cli_usage_error("%s: unknown command", name);
	if (c->takes_cmd && ar.cmd == NULL) {
		/* `admit run api k curl x`: the command's words look like arguments */
		fprintf(stderr, "admit %s: put -- before the command: admit %s " RUN_USAGE "\n",
			c->name, c->name);
		return EXIT_USAGE;
	}
	if (ar.extra != NULL)
		return cli_usage_error("%s: too many arguments", ar.extra);
	if (ar.npos < c->minpos || ar.npos > c->maxpos) {
		/* the command's own usage line, so that `admit release` says LEASE */
		fprintf(stderr, "admit: usage: admit %s%s%s\n(admit --help lists the commands)\n",
			c->name, c->usage[0] != '\0' ? " " : "", c->usage);
		return EXIT_USAGE;
	}
	for (o = 0; o < O__COUNT; o++)
		if (ar.set[o] && !(ANY_OPTS & OPT(o)) && !(c->opts & OPT(o)))
			return cli_usage_error("--%s does not go with this command",
					       cli_opts[o].name);
	if (c->takes_cmd != (ar.cmd != NULL) || (ar.cmd && ar.cmd[0] == NULL))
		return cli_usage_error(
		    c->takes_cmd ? "%s: wants -- CMD [ARG...]" : "%s: takes no -- CMD", c->name);
	rc = cli_connect_timeout(&ar, &connect_ms);
	if (rc != 0)
		return rc;
	/* connects on the first call, within that call's budget */
	a = admit_new(ar.val[O_SOCKET]);
	if (a == NULL) {
		fprintf(stderr, "admit: %s\n", strerror(errno));
		return EXIT_SOFTWARE;
	}
	if (connect_ms >= 0)
		admit_set_connect_timeout(a, connect_ms);
	rc = c->fn(a, &ar);
	admit_close(a);
	fflush(stdout);
	return rc;
}
