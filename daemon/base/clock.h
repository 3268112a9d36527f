/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * clock.h - the only place the daemon reads time.
 *
 * clock_mono_ms drives the in-process limiter and every timer (it never
 * jumps); clock_wall_ms is only for converting an HTTP-date Retry-After
 * into a delay. In Redis mode the limiter's clock is Redis TIME, not these.
 */

#ifndef ADMITD_CLOCK_H
#define ADMITD_CLOCK_H

#include <stdint.h>

int64_t clock_mono_ms(void);
int64_t clock_wall_ms(void);

#endif
