/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * decimal.h - integers written in decimal without printf.
 *
 * Owns: the digit writing of the hot paths (a reply's numbers, a Redis call's
 * arguments and its RESP lengths): two digits a division, written from the
 * last one back, the same bytes as printf's "%lld" / "%llu".
 */

#ifndef ADMITD_DECIMAL_H
#define ADMITD_DECIMAL_H

#include <stddef.h>
#include <stdint.h>

/* The most bytes dec_put_i64 writes: a sign and 20 digits. */
#define DEC_MAX 21

/* dec_len_u64 - how many digits u is written with. */
size_t dec_len_u64(uint64_t u);

/* dec_len_i64 - how many bytes v is written with, its sign included. */
size_t dec_len_i64(int64_t v);

/* dec_put_u64 - u's digits, ending just before end; returns the first. */
char *dec_put_u64(char *end, uint64_t u);

/* dec_put_i64 - v (a '-' first when negative), ending just before end;
 * returns its first byte. */
char *dec_put_i64(char *end, int64_t v);

#endif
