/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * slot.h - Redis Cluster key slots: CRC16 of the hash tag, mod 16384.
 *
 * Pure: no state, no allocation. The tag rule is Redis's: the bytes
 * between the first '{' and the next '}' when that is not empty, else the
 * whole key.
 */

#ifndef ADMITD_SLOT_H
#define ADMITD_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define SLOT_COUNT 16384

/* crc16 - CRC16-CCITT (XMODEM), the one Redis Cluster uses. */
uint16_t crc16(const char *buf, size_t len);

/* key_slot - the slot of key[0..len). */
unsigned key_slot(const char *key, size_t len);

#endif
