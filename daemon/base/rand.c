/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * rand.c - fast random numbers that need no secrecy (see rand.h).
 */

#include "rand.h"

#include <sys/random.h>
#include <sys/types.h>

uint64_t rand_u64(void)
{
	/* xorshift64*, seeded once from the kernel: jitter needs speed, not secrecy. */
	static uint64_t s;

	if (s == 0 && (getrandom(&s, sizeof(s), 0) != (ssize_t)sizeof(s) || s == 0))
		s = 0x9e3779b97f4a7c15ULL;
	s ^= s >> 12;
	s ^= s << 25;
	s ^= s >> 27;
	return s * 2685821657736338717ULL;
}
