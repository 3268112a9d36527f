/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * log.c - leveled key=value log lines on stderr.
 *
 * Owns: the log level and the rate-limit slots of log_ratelimited.
 * Lines are written with one fprintf each, so they do not interleave.
 */

#include "log.h"

#include "clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum log_level log_current_level = LOG_INFO;

static const char *const log_names[] = { "debug", "info", "warn", "error" };

/* Per-slot state of log_ratelimited: when it last printed, what it dropped. */
static struct {
	int64_t last_ms;
	unsigned long suppressed;
} log_slots[LOG_SLOT__COUNT];

bool log_set_level_name(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++) {
		if (strcmp(name, log_names[i]) == 0) {
			log_current_level = (enum log_level)i;
			return true;
		}
	}
	return false;
}

static void log_vwrite(enum log_level lvl, const char *msg, const char *fmt, va_list ap,
		       unsigned long suppressed)
{
	char ts[32], tail[1024] = "";
	struct timespec now;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	if (fmt != NULL)
		vsnprintf(tail, sizeof(tail), fmt, ap);
	if (suppressed > 0)
		fprintf(stderr, "ts=%s.%03ldZ level=%s msg=\"%s\" %s suppressed=%lu\n", ts,
			now.tv_nsec / 1000000, log_names[lvl], msg, tail, suppressed);
	else
		fprintf(stderr, "ts=%s.%03ldZ level=%s msg=\"%s\"%s%s\n", ts, now.tv_nsec / 1000000,
			log_names[lvl], msg, tail[0] ? " " : "", tail);
}

void log_write(enum log_level lvl, const char *msg, const char *fmt, ...)
{
	va_list ap;

	if (lvl < log_current_level)
		return;
	va_start(ap, fmt);
	log_vwrite(lvl, msg, fmt, ap, 0);
	va_end(ap);
}

void log_ratelimited(unsigned slot, int64_t interval_ms, const char *msg, const char *fmt, ...)
{
	va_list ap;
	int64_t now = clock_mono_ms();

	if (slot >= LOG_SLOT__COUNT || log_current_level > LOG_WARN)
		return;
	if (log_slots[slot].last_ms != 0 && now - log_slots[slot].last_ms < interval_ms) {
		log_slots[slot].suppressed++;
		return;
	}
	va_start(ap, fmt);
	log_vwrite(LOG_WARN, msg, fmt, ap, log_slots[slot].suppressed);
	va_end(ap);
	log_slots[slot].last_ms = now;
	log_slots[slot].suppressed = 0;
}

void fatal(const char *msg, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_ERROR, msg, fmt, ap, 0);
	va_end(ap);
	exit(1);
}
