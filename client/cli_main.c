/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * cli_main.c - the `admit` command line: libadmit for shell scripts.
 *
 * Owns: the subcommand table (name, usage, arity, allowed options, handler,
 * smtpctl/tmux style) and the option table (an option may repeat), --help,
 * splitting argv into options, positionals and run's "-- CMD", checking the
 * command line against the command's entry, the connect timeout
 * (--connect-timeout, else $ADMITD_CONNECT_TIMEOUT), and the handle each
 * command is given. The commands themselves live in cli_acquire.c,
 * cli_run.c, cli_keys.c and cli_show.c. No file of the command has protocol
 * knowledge: every exchange goes through admit.h, whose handle connects on
 * the first call (so the wait for a daemon that is still starting counts
 * against that call's budget).
 */

#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define OPT(x) (1u << (x))
#define ACQ_OPTS \
	(OPT(O_URL) | OPT(O_CLASS) | OPT(O_TENANT) | OPT(O_COST) | OPT(O_TIMEOUT) | OPT(O_RESERVE))
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
	[O_TENANT] = { "tenant", true,
		       "T      whose request: orders a key's waiters among tenants\n"
		       "                    by the scope's weight lines ([A-Za-z0-9_.-], 1..64)" },
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
	[O_WEIGHT] = { "weight", true,
		       "W      override: --tenant T's weight on the key (1..1000),\n"
		       "                    within the scope's override_max" },
	[O_HELP] = { "help", false, "         this help" },
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

#define RUN_USAGE "SCOPE KEY [options] -- CMD ..."

static const struct cli_cmd cli_cmds[] = {
	{ "acquire",
	  "SCOPE [KEY] [--url URL] [--class C] [--tenant T] [--cost N] [--timeout D] [--reserve "
	  "LIST] "
	  "[--detach]",
	  1, 2, ACQ_OPTS | OPT(O_DETACH), false, cmd_acquire,
	  "wait for admission, print the lease (always detached: it outlives this\n"
	  "\t\tcommand; give it to `admit release`, else it expires at lease_ttl)" },
	{ "try", "SCOPE [KEY] [--url URL] [--class C] [--tenant T] [--cost N] [--reserve LIST]", 1,
	  2, ACQ_OPTS & ~OPT(O_TIMEOUT), false, cmd_try,
	  "admit now or exit 75 printing the retry-after (seconds); the lease\n"
	  "\t\tis printed and detached like acquire's" },
	{ "once", "SCOPE [KEY] [--url URL] [--class C] [--tenant T] [--cost N] [--timeout D]", 1, 2,
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
	  "SCOPE [KEY] [--url URL] [--class C] [--tenant T] [--cost N] [--timeout D] [--reserve "
	  "LIST] "
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
	  "\t\tquota, each rule's remaining units, tenants' weights set, and\n"
	  "\t\tits queue here, a line per class (--json: the raw reply)" },
	{ "override",
	  "SCOPE [KEY] [--url URL] --ttl D [--min-delay D] [--rule RULE=N]... | --tenant T "
	  "--weight W",
	  1, 2,
	  OPT(O_URL) | OPT(O_TTL) | OPT(O_MIN_DELAY) | OPT(O_RULE) | OPT(O_TENANT) | OPT(O_WEIGHT),
	  false, cmd_override,
	  "for --ttl, replace the key's min_delay and rule amounts (on every\n"
	  "\t\tdaemon; a new override replaces the last, reset lifts it), or\n"
	  "\t\tset one tenant's weight on the key (--tenant T --weight W); within\n"
	  "\t\tthe scope's override_max when it loosens; prints \"override\"" },
	{ "status", "[--json]", 0, 0, OPT(O_JSON), false, cmd_status,
	  "top's table once (since the daemon started), then the counters\n"
	  "\t\tas tables (--json: the raw reply)" },
	{ "top", "[--interval D]", 0, 0, OPT(O_INTERVAL), false, cmd_top,
	  "a live view, one row per scope: admissions/s, refusals/s by\n"
	  "\t\treason, waiters, leases, wait p50/p99 of the interval, then\n"
	  "\t\tthe keys with the most waiters and their tenants; q quits" },
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
	cli_exit_usage(out);
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
	if (ar.set[O_TENANT] && admit_set_tenant(a, ar.val[O_TENANT]) < 0) {
		fprintf(stderr, "admit: %s\n", strerror(errno));
		admit_close(a);
		return EXIT_SOFTWARE;
	}
	rc = c->fn(a, &ar);
	admit_close(a);
	fflush(stdout);
	return rc;
}
