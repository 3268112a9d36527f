/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * slot.c - CRC16 and key slots (see slot.h). Bitwise rather than a table:
 * one call per Redis call, on keys of a few dozen bytes.
 */

#include "slot.h"

#include <string.h>

uint16_t crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((unsigned char)buf[i] << 8);
		for (int b = 0; b < 8; b++)
			crc =
			    (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc;
}

unsigned key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open != NULL) {
		size_t s = (size_t)(open - key) + 1;
		const char *close = memchr(key + s, '}', len - s);
		if (close != NULL && close > key + s)
			return crc16(key + s, (size_t)(close - key - (ptrdiff_t)s)) &
			       (SLOT_COUNT - 1);
	}
	return crc16(key, len) & (SLOT_COUNT - 1);
}
