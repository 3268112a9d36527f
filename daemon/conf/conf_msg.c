/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_msg.c - the conf loader's messages.
 *
 * Owns: conf_err (one problem reported as "file:line: message", counted so
 * a load with any problem fails), conf_fmt (a setter's message, formatted
 * into the parse context's buffer) and conf_fmt_duration (a duration as a
 * user would write it, for messages and the --help-conf text). It sits at
 * the bottom of the folder: the parser, the setters, the checks and the
 * option tables call it, and it calls none of them.
 */

#include "conf_int.h"

#include <stdarg.h>
#include <stdio.h>

/* Report one problem; line 0 means "not about a line". */
void conf_err(struct conf_ctx *x, int line, const char *fmt, ...)
{
	va_list ap;

	x->nerrors++;
	if (x->errf == NULL)
		return;
	if (line > 0)
		fprintf(x->errf, "%s:%d: ", x->name, line);
	else
		fprintf(x->errf, "%s: ", x->name);
	va_start(ap, fmt);
	vfprintf(x->errf, fmt, ap);
	va_end(ap);
	fputc('\n', x->errf);
}

/* Format a setter's message into the context's buffer and return it. */
const char *conf_fmt(struct conf_ctx *x, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(x->errbuf, sizeof(x->errbuf), fmt, ap);
	va_end(ap);
	return x->errbuf;
}

void conf_fmt_duration(char *buf, size_t len, int64_t ms)
{
	static const struct {
		int64_t ms;
		const char *unit;
	} u[] = { { MS_HOUR, "h" }, { MS_MIN, "m" }, { MS_SEC, "s" } };

	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
		if (ms != 0 && ms % u[i].ms == 0) {
			snprintf(buf, len, "%lld%s", (long long)(ms / u[i].ms), u[i].unit);
			return;
		}
	}
	snprintf(buf, len, ms == 0 ? "0" : "%lldms", (long long)ms);
}
