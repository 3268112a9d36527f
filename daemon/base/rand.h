/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rand.h - fast random numbers that need no secrecy: jitter, a pod's name.
 *
 * Owns: one xorshift64* state, seeded once from the kernel. What must be
 * unguessable (a lease's nonce) comes from getrandom() itself; lease.c
 * falls back to this only when the kernel gives no randomness.
 */

#ifndef ADMITD_RAND_H
#define ADMITD_RAND_H

#include <stdint.h>

/* rand_u64 - the next 64 pseudo-random bits. */
uint64_t rand_u64(void);

#endif
