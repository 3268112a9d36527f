/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * decimal.c - integers written in decimal without printf (decimal.h).
 */

#include "decimal.h"

#include <string.h>

/* "00" to "99" */
static const char dec_pairs[] = "00010203040506070809101112131415161718192021222324"
				"25262728293031323334353637383940414243444546474849"
				"50515253545556575859606162636465666768697071727374"
				"75767778798081828384858687888990919293949596979899";

size_t dec_len_u64(uint64_t u)
{
	size_t n = 1;

	for (; u >= 10000; u /= 10000)
		n += 4;
	return n + (u >= 10) + (u >= 100) + (u >= 1000);
}

size_t dec_len_i64(int64_t v)
{
	return v < 0 ? 1 + dec_len_u64(0 - (uint64_t)v) : dec_len_u64((uint64_t)v);
}

char *dec_put_u64(char *end, uint64_t u)
{
	char *p = end;

	while (u >= 100) {
		p -= 2;
		memcpy(p, dec_pairs + (u % 100) * 2, 2);
		u /= 100;
	}
	if (u >= 10) {
		p -= 2;
		memcpy(p, dec_pairs + u * 2, 2);
	} else {
		*--p = (char)('0' + u);
	}
	return p;
}

char *dec_put_i64(char *end, int64_t v)
{
	char *p;

	if (v >= 0)
		return dec_put_u64(end, (uint64_t)v);
	p = dec_put_u64(end, 0 - (uint64_t)v);
	*--p = '-';
	return p;
}
