/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * log.h - leveled key=value log lines on stderr.
 *
 * Owns: the current log level and the line format
 * `ts=2026-11-29T21:00:00.123Z level=warn msg="..." key=value ...`.
 * The level is tested before anything is formatted.
 */

#ifndef ADMITD_LOG_H
#define ADMITD_LOG_H

#include <stdbool.h>
#include <stdint.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

extern enum log_level log_current_level;

/* log_set_level_name - "debug", "info", "warn", "error"; false if unknown. */
bool log_set_level_name(const char *name);

/*
 * log_write - one line: msg is quoted, fmt (may be NULL) is appended as is
 * and should be `key=value` pairs. Use the macros so that a disabled level
 * costs one comparison.
 */
void log_write(enum log_level lvl, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * log_ratelimited - like log_write at LOG_WARN, but at most once per
 * interval_ms for the same `slot` (a small integer the caller owns);
 * returns how many lines were suppressed since the last one printed.
 */
void log_ratelimited(unsigned slot, int64_t interval_ms, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define log_debug(msg, ...)                                     \
	do {                                                    \
		if (log_current_level <= LOG_DEBUG)             \
			log_write(LOG_DEBUG, msg, __VA_ARGS__); \
	} while (0)
#define log_info(msg, ...)                                     \
	do {                                                   \
		if (log_current_level <= LOG_INFO)             \
			log_write(LOG_INFO, msg, __VA_ARGS__); \
	} while (0)
#define log_warn(msg, ...)  log_write(LOG_WARN, msg, __VA_ARGS__)
#define log_error(msg, ...) log_write(LOG_ERROR, msg, __VA_ARGS__)

/* fatal - startup only: log at error level and exit(1). */
void fatal(const char *msg, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

#define LOG_SLOT_REDIS	    0
#define LOG_SLOT_FALLBACK   1
#define LOG_SLOT_ACCEPT	    2
#define LOG_SLOT_LEASE	    3
#define LOG_SLOT_RECONCILE  4
#define LOG_SLOT_REDIS_CONN 5
#define LOG_SLOT_REDIS_CALL 6
#define LOG_SLOT_HTTP	    7
#define LOG_SLOT_NOTIFY	    8
#define LOG_SLOT_FORBIDDEN  9
#define LOG_SLOT_KEYS	    10
#define LOG_SLOT_LEASES	    11
#define LOG_SLOT__COUNT	    12

#endif
