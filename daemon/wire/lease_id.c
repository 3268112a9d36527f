/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * lease_id.c - lease handles: format and parse (see lease_id.h).
 */

#include "lease_id.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_ID_VERSION 1

static const char lease_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static int lease_b64_val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '-')
		return 62;
	if (c == '_')
		return 63;
	return -1;
}

/*
 * Eight bytes at once (every release checks a nonce). For a byte x below
 * 0x80, x + (0x80 - c) has its top bit set exactly when x >= c, and never
 * carries into the next byte: so each byte's top bit of lease_ge(w, c) says
 * x >= c, for all eight at once.
 */
#define LEASE_ONES  0x0101010101010101ULL
#define LEASE_HIGHS 0x8080808080808080ULL

static uint64_t lease_ge(uint64_t w, unsigned c)
{
	return (w + LEASE_ONES * (0x80 - c)) & LEASE_HIGHS;
}

bool lease_id_nonce_ok(const char *s, size_t len)
{
	uint64_t bad = 0;
	size_t i;

	if (len != LEASE_NONCE_LEN)
		return false;
	for (i = 0; i < LEASE_NONCE_LEN; i += 8) {
		uint64_t w, digit, hex;

		memcpy(&w, s + i, sizeof(w));
		digit = lease_ge(w, '0') & ~lease_ge(w, '9' + 1);
		hex = lease_ge(w, 'a') & ~lease_ge(w, 'f' + 1);
		bad |= (w & LEASE_HIGHS) | ((digit | hex) ^ LEASE_HIGHS);
	}
	return bad == 0;
}

/* Append s and its NUL to buf at *off; false when s is longer than max. */
static bool lease_put(unsigned char *buf, size_t *off, const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n > max)
		return false;
	memcpy(buf + *off, s, n + 1);
	*off += n + 1;
	return true;
}

/*
 * The handle of sp with nonce NULL: its body alone (what follows the '.'),
 * which names the lease's targets and reservation but not the lease.
 */
static char *lease_id_encode(const struct lease_spec *sp, const char *nonce)
{
	unsigned char raw[LEASE_ID_PAYLOAD_MAX];
	size_t n = 0, i, o = 0;
	char *out;

	if (sp->nt == 0 || sp->nt > PROTO_MAX_TARGETS || sp->nreserve > PROTO_MAX_TOKENS)
		return NULL;
	raw[n++] = LEASE_ID_VERSION;
	for (i = 0; i < sp->nt; i++)
		if (sp->scope[i][0] == '\0' || !lease_put(raw, &n, sp->scope[i], PROTO_NAME_MAX) ||
		    !lease_put(raw, &n, sp->cls[i] ? sp->cls[i] : "", PROTO_NAME_MAX) ||
		    !lease_put(raw, &n, sp->key[i], PROTO_KEY_MAX))
			return NULL;
	if (sp->nreserve > 0)
		raw[n++] = '\0'; /* an empty scope: the reservations follow */
	for (i = 0; i < sp->nreserve; i++) {
		char num[LEASE_ID_COUNT_MAX];
		if (sp->reserve[i].name[0] == '\0' || sp->reserve[i].n < 0)
			return NULL;
		snprintf(num, sizeof(num), "%lld", (long long)sp->reserve[i].n);
		if (!lease_put(raw, &n, sp->reserve[i].name, PROTO_NAME_MAX) ||
		    !lease_put(raw, &n, num, LEASE_ID_COUNT_MAX - 1))
			return NULL;
	}
	out = malloc(LEASE_NONCE_LEN + 2 + (n + 2) / 3 * 4);
	if (out == NULL)
		return NULL;
	if (nonce != NULL) {
		memcpy(out, nonce, LEASE_NONCE_LEN);
		o = LEASE_NONCE_LEN;
		out[o++] = '.';
	}
	for (i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)raw[i] << 16;
		size_t left = n - i;
		if (left > 1)
			v |= (uint32_t)raw[i + 1] << 8;
		if (left > 2)
			v |= raw[i + 2];
		out[o++] = lease_b64[(v >> 18) & 63];
		out[o++] = lease_b64[(v >> 12) & 63];
		if (left > 1)
			out[o++] = lease_b64[(v >> 6) & 63];
		if (left > 2)
			out[o++] = lease_b64[v & 63];
	}
	out[o] = '\0';
	return out;
}

char *lease_id_make(const struct lease_spec *sp)
{
	if (sp->nonce == NULL || !lease_id_nonce_ok(sp->nonce, strlen(sp->nonce)))
		return NULL;
	return lease_id_encode(sp, sp->nonce);
}

char *lease_id_body(const struct lease_spec *sp)
{
	return lease_id_encode(sp, NULL);
}

char *lease_id_format(const struct lease_ref *ref)
{
	struct lease_spec sp = { .nonce = ref->nonce, .nt = ref->nt };
	struct meter_tokens rs[PROTO_MAX_TOKENS];
	size_t i;

	if (ref->nt > PROTO_MAX_TARGETS || ref->nreserve > PROTO_MAX_TOKENS)
		return NULL;
	for (i = 0; i < ref->nt; i++) {
		sp.scope[i] = ref->t[i].scope;
		sp.cls[i] = ref->t[i].cls;
		sp.key[i] = ref->t[i].key;
	}
	for (i = 0; i < ref->nreserve; i++) {
		rs[i].name = ref->reserve[i].name;
		rs[i].n = ref->reserve[i].n;
	}
	sp.reserve = rs;
	sp.nreserve = ref->nreserve;
	return lease_id_make(&sp);
}

/* Take one NUL-terminated field of at most max bytes from raw at *off. */
static bool lease_take(const unsigned char *raw, size_t n, size_t *off, char *dst, size_t max)
{
	const unsigned char *end = memchr(raw + *off, '\0', n - *off);
	size_t len;

	if (end == NULL)
		return false;
	len = (size_t)(end - (raw + *off));
	if (len > max)
		return false;
	memcpy(dst, raw + *off, len + 1);
	*off += len + 1;
	return true;
}

bool lease_id_parse(const char *handle, struct lease_ref *ref)
{
	unsigned char raw[LEASE_ID_PAYLOAD_MAX];
	size_t len = strlen(handle), blen, n = 0, i, off;
	const char *b;

	memset(ref, 0, sizeof(*ref));
	if (len < LEASE_NONCE_LEN + 2 || len > LEASE_ID_MAX || handle[LEASE_NONCE_LEN] != '.' ||
	    !lease_id_nonce_ok(handle, LEASE_NONCE_LEN))
		return false;
	b = handle + LEASE_NONCE_LEN + 1;
	blen = len - LEASE_NONCE_LEN - 1;
	if (blen % 4 == 1)
		return false;
	for (i = 0; i < blen; i += 4) {
		size_t left = blen - i, k;
		uint32_t v = 0;
		for (k = 0; k < 4; k++) {
			int d = k < left ? lease_b64_val((unsigned char)b[i + k]) : 0;
			if (d < 0)
				return false;
			v = (v << 6) | (uint32_t)d;
		}
		if (n + 3 > sizeof(raw))
			return false;
		/* Canonical: the bits past the last whole byte are zero. */
		if ((left == 2 && (v & 0xffff) != 0) || (left == 3 && (v & 0xff) != 0))
			return false;
		raw[n++] = (unsigned char)(v >> 16);
		if (left > 2)
			raw[n++] = (unsigned char)(v >> 8);
		if (left > 3)
			raw[n++] = (unsigned char)v;
	}
	if (n < 1 || raw[0] != LEASE_ID_VERSION)
		return false;
	off = 1;
	while (off < n && raw[off] != '\0') {
		struct lease_ref_target *t;
		if (ref->nt == PROTO_MAX_TARGETS)
			return false;
		t = &ref->t[ref->nt++];
		if (!lease_take(raw, n, &off, t->scope, PROTO_NAME_MAX) ||
		    !lease_take(raw, n, &off, t->cls, PROTO_NAME_MAX) ||
		    !lease_take(raw, n, &off, t->key, PROTO_KEY_MAX) || t->scope[0] == '\0')
			return false;
	}
	if (ref->nt == 0)
		return false;
	if (off < n) { /* the reservations */
		off++;
		if (off == n)
			return false;
		while (off < n) {
			struct proto_token *tk;
			char num[LEASE_ID_COUNT_MAX], *end;
			if (ref->nreserve == PROTO_MAX_TOKENS)
				return false;
			tk = &ref->reserve[ref->nreserve++];
			if (!lease_take(raw, n, &off, tk->name, PROTO_NAME_MAX) ||
			    !lease_take(raw, n, &off, num, LEASE_ID_COUNT_MAX - 1) ||
			    tk->name[0] == '\0' || num[0] < '0' || num[0] > '9' ||
			    (num[0] == '0' && num[1] != '\0'))
				return false;
			tk->n = strtoll(num, &end, 10);
			if (*end != '\0' || tk->n < 0 || tk->n > PROTO_MAX_COST)
				return false;
		}
	}
	memcpy(ref->nonce, handle, LEASE_NONCE_LEN);
	ref->nonce[LEASE_NONCE_LEN] = '\0';
	return true;
}
