/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * lease_id.h - the lease handle a client holds: what a release needs.
 *
 * Owns: the text form of a lease. A handle is the lease's 128-bit random
 * nonce (32 lowercase hex digits: the name it is booked under, in process
 * and in Redis, and what makes the handle unguessable) then '.' then the
 * base64url (no padding) of a version byte and, per target, its scope,
 * class ("" for none) and key, each NUL-terminated; then, when the acquire
 * reserved tokens, an empty field and each reservation's meter name and
 * decimal count, NUL-terminated. So any daemon on the
 * same Redis can release a lease it did not issue (after a restart, through
 * another pod) and charge its tokens, with no shared table: what it names
 * is checked against the lease's settlement record there, which binds the
 * handle's body (lease_id_body), never trusted. Pure: no I/O.
 */

#ifndef ADMITD_LEASE_ID_H
#define ADMITD_LEASE_ID_H

#include "conf.h"
#include "proto.h"

#include <stdbool.h>
#include <stddef.h>

/* A lease's nonce: 32 lowercase hex digits (its name in process and in Redis). */
#define LEASE_NONCE_LEN 32

struct lease_ref_target {
	char scope[PROTO_NAME_MAX + 1];
	char cls[PROTO_NAME_MAX + 1]; /* "" when the lease has no class */
	char key[PROTO_KEY_MAX + 1];
};

struct lease_ref {
	char nonce[LEASE_NONCE_LEN + 1];
	size_t nt;
	struct lease_ref_target t[PROTO_MAX_TARGETS];
	size_t nreserve;
	struct proto_token reserve[PROTO_MAX_TOKENS]; /* tokens reserved at acquire */
};

/* The longest handle lease_id_format can make (fits PROTO_LEASE_MAX). */
#define LEASE_ID_COUNT_MAX 20 /* digits of a count, and its NUL */
#define LEASE_ID_PAYLOAD_MAX                                                          \
	(1 + PROTO_MAX_TARGETS * (2 * (PROTO_NAME_MAX + 1) + PROTO_KEY_MAX + 1) + 1 + \
	 PROTO_MAX_TOKENS * (PROTO_NAME_MAX + 1 + LEASE_ID_COUNT_MAX))
#define LEASE_ID_MAX (LEASE_NONCE_LEN + 1 + (LEASE_ID_PAYLOAD_MAX + 2) / 3 * 4)

/* What a handle is made of, by reference (no copies: the hot path's form). */
struct lease_spec {
	const char *nonce;
	size_t nt;
	const char *scope[PROTO_MAX_TARGETS], *cls[PROTO_MAX_TARGETS], *key[PROTO_MAX_TARGETS];
	const struct meter_tokens *reserve;
	size_t nreserve;
};

/*
 * lease_id_make - the handle of sp, malloc'd (the caller frees it); NULL on
 * allocation failure or when sp is malformed (bad nonce, no target, an empty
 * scope, a field too long, a negative count).
 */
char *lease_id_make(const struct lease_spec *sp);

/*
 * lease_id_body - what lease_id_make puts after the nonce and its '.' (the
 * targets and the reservation, sp->nonce unused), malloc'd; NULL as
 * lease_id_make. A lease's settlement record in Redis holds it, so that a
 * handle another daemon is sent settles only when it names exactly what
 * was issued (release.lua).
 */
char *lease_id_body(const struct lease_spec *sp);

/* lease_id_format - lease_id_make from a parsed form (round trips). */
char *lease_id_format(const struct lease_ref *ref);

/*
 * lease_id_parse - fill ref from a handle; false when it is not one (any
 * malformation: length, alphabet, non-canonical base64 (bits set past the
 * last byte), version, field sizes, target count, a count with leading
 * zeros). A handle is accepted only in the one form lease_id_make gives.
 */
bool lease_id_parse(const char *handle, struct lease_ref *ref);

/* lease_id_nonce_ok - is s exactly 32 lowercase hex digits? */
bool lease_id_nonce_ok(const char *s, size_t len);

#endif
