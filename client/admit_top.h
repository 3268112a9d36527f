/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_top.h - the per-scope activity table of `admit top` and `admit
 * status`: rates, waiters, leases and wait percentiles from two status
 * replies, and top's live terminal loop.
 */

#ifndef ADMIT_TOP_H
#define ADMIT_TOP_H

#include "admit.h"

#include <stdint.h>

/*
 * top_table - the activity table of cur against prev (an earlier status
 * reply of the same daemon), one line per scope after a header line, each
 * passed to emit without its newline. prev NULL (or from an earlier run
 * of the daemon): since the daemon started.
 */
void top_table(const struct admit_result *cur, const struct admit_result *prev,
	       void (*emit)(void *ctx, const char *line), void *ctx);

/*
 * top_run - the live view: a status request every interval_ms, the table
 * redrawn in place (ANSI escapes, the terminal's alternate screen) until
 * `q` is read from standard input or a signal (INT, TERM, HUP, QUIT)
 * arrives; the terminal is restored either way. 0 after `q`, 128+N after
 * signal N; -1 when a status request failed: *fail then holds its result,
 * for the caller to report (and free).
 */
int top_run(struct admit *a, int64_t interval_ms, struct admit_result *fail);

#endif
