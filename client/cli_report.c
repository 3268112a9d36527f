/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * cli_report.c - what the `admit` command reports when something fails, and
 * the status it exits with.
 *
 * Owns: the exit-status table (sysexits style, printed by --help) and the
 * mapping from each libadmit or daemon error to its status, usage errors,
 * a failed call's report (the error, the daemon's message, the rule and
 * target that refused, the remaining units, and the retry-after both on
 * stderr and, in seconds, on stdout for `sleep "$(admit try ...)"`), and a
 * reply printed raw (--json).
 */

#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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

void cli_exit_usage(FILE *out)
{
	size_t i;

	fprintf(out, "\nexit status:\n");
	for (i = 0; i < sizeof(cli_exit_docs) / sizeof(cli_exit_docs[0]); i++) {
		if (cli_exit_docs[i].code < 0)
			fprintf(out, "  %s\n", cli_exit_docs[i].meaning);
		else
			fprintf(out, "  %3d  %s\n", cli_exit_docs[i].code,
				cli_exit_docs[i].meaning);
	}
}

int cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "admit: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
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
int cli_fail(const char *what, const struct admit_result *r)
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

int cli_done(const char *what, struct admit_result *r)
{
	int rc = r->err == ADMIT_OK ? EXIT_ADMITTED : cli_fail(what, r);

	admit_result_free(r);
	return rc;
}

int cli_reply_raw(const char *what, struct admit_result *r, bool json)
{
	int rc;

	if (r->err != ADMIT_OK) {
		rc = cli_fail(what, r);
		admit_result_free(r);
		return rc;
	}
	if (!json)
		return -1;
	printf("%s\n", r->raw);
	admit_result_free(r);
	return EXIT_ADMITTED;
}
