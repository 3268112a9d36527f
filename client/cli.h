/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * cli.h - what the files of the `admit` command share: the exit statuses,
 * the option ids, the parsed command line (struct cli_args), the protocol's
 * bounds as the command line words them, the value parsers and failure
 * reports every command uses, and each command's handler (the table that
 * names them is cli_main.c's).
 */

#ifndef CLI_H
#define CLI_H

#include "admit.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* sysexits.h values, spelled out so that cli_report.c's table is the one reference */
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

enum cli_opt_id {
	O_SOCKET,
	O_CONNECT_TIMEOUT,
	O_URL,
	O_CLASS,
	O_TENANT,
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
	O_WEIGHT,
	O_HELP,
	O__COUNT
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

/* cli_report.c: exit statuses and what admit says on stderr */

/* cli_exit_usage - the "exit status:" section of --help. */
void cli_exit_usage(FILE *out);

/* cli_usage_error - say what is wrong with the command line; EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * cli_fail - report a failed call on stderr (and a retry-after, in seconds,
 * on stdout so `sleep "$(admit try ...)"` works); returns the exit status.
 */
int cli_fail(const char *what, const struct admit_result *r);

/* cli_done - EXIT_ADMITTED, or r's failure reported (cli_fail); frees r. */
int cli_done(const char *what, struct admit_result *r);

/*
 * cli_reply_raw - a status or inspect reply that needs no table: its
 * failure reported, or with `json` the raw reply printed; r is then freed
 * and the exit status returned. -1 (r kept): the caller prints it.
 */
int cli_reply_raw(const char *what, struct admit_result *r, bool json);

/* cli_value.c: the values of the command line */

/*
 * cli_duration - a duration in ms: a number (decimals allowed) with a unit
 * ms, s, m or h; a bare number is seconds when bare_ok. 0 or -1.
 */
int cli_duration(const char *s, bool bare_ok, int64_t *ms);

/* cli_int - a decimal integer >= 0 and nothing after it; 0 or -1. */
int cli_int(const char *s, int64_t *out);

/*
 * cli_token_list - option --`opt`'s value "input=300,output=200" into tk
 * (at most CLI_MAX_TOKENS; empty only when empty_ok); the names point into
 * *buf, which the caller frees. 0, or the exit status after saying why.
 */
int cli_token_list(const char *opt, const char *val, bool empty_ok, char **buf,
		   struct admit_token *tk, size_t *n);

/*
 * cli_key_args - SCOPE [KEY] [--url URL]: key or url, at most one (neither:
 * the scope's default key). 0 or the usage error status.
 */
int cli_key_args(const struct cli_args *ar, const char **key, const char **url);

/* cli_acquire.c: an acquire's request, and the commands that take a lease */

/* An acquire's request and the storage its --reserve list points into. */
struct cli_acq {
	struct admit_req rq;
	struct admit_token reserve[CLI_MAX_TOKENS];
	char *buf; /* the --reserve copy the names point into; cli_acq_free frees it */
};

/*
 * cli_req - SCOPE [KEY] [--url ...] [--cost ...] ... into q->rq; 0, or the
 * usage error status (q then freed).
 */
int cli_req(const struct cli_args *ar, struct cli_acq *q);
void cli_acq_free(struct cli_acq *q);

/* the commands, each in the file of its group */
int cmd_acquire(struct admit *a, const struct cli_args *ar);
int cmd_try(struct admit *a, const struct cli_args *ar);
int cmd_once(struct admit *a, const struct cli_args *ar);
int cmd_release(struct admit *a, const struct cli_args *ar);
int cmd_run(struct admit *a, const struct cli_args *ar);      /* cli_run.c */
int cmd_penalize(struct admit *a, const struct cli_args *ar); /* cli_keys.c */
int cmd_reset(struct admit *a, const struct cli_args *ar);
int cmd_override(struct admit *a, const struct cli_args *ar);
int cmd_status(struct admit *a, const struct cli_args *ar); /* cli_show.c */
int cmd_top(struct admit *a, const struct cli_args *ar);
int cmd_inspect(struct admit *a, const struct cli_args *ar);
int cmd_ping(struct admit *a, const struct cli_args *ar);

#endif
