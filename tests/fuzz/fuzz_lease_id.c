/*
 * fuzz_lease_id.c - libFuzzer target for the lease handle decoder
 * (daemon/wire/lease_id.c), the bytes a client sends back in a release.
 *
 * An input is one handle. When lease_id_parse takes it, it must be in the
 * one canonical form: lease_id_format of what was parsed gives the same
 * bytes back, and parsing that again gives the same parse. Every field the
 * parse fills must end inside its buffer, and the body a settlement record
 * binds (lease_id_body) must be the handle's text after its '.', so that a
 * handle whose class, scope, key or reservation was edited (another
 * canonical handle) never binds the same record: each target's class, scope
 * and key, and each reserved count, is edited in turn and the body must
 * change (or the edit be refused). Any broken invariant
 * aborts, so libFuzzer keeps the input; ASan and UBSan catch the rest.
 *
 *   make fuzz-lease        (clang; see mk/fuzz.mk)
 */

#include "lease_id.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                          \
	do {                                                                                      \
		if (!(cond)) {                                                                    \
			fprintf(stderr, "fuzz_lease_id: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                  \
		}                                                                                 \
	} while (0)

/* dst: src edited (one byte changed or one added), within max bytes. */
static void fuzz_edit(char *dst, const char *src, size_t max)
{
	size_t n = strlen(src);

	memcpy(dst, src, n + 1);
	if (n < max) {
		dst[n] = 'e';
		dst[n + 1] = '\0';
	} else {
		dst[n - 1] = dst[n - 1] == 'e' ? 'f' : 'e';
	}
}

/*
 * Each one-field edit of sp (a target's scope, class or key; a reserved
 * count) gives another body than body, or none (the edit is no handle).
 */
static void fuzz_edits(struct lease_spec *sp, struct meter_tokens *rs, const char *body)
{
	char buf[PROTO_KEY_MAX + 2];
	size_t i, f;

	for (i = 0; i < sp->nt; i++) {
		for (f = 0; f < 3; f++) {
			const char **field = f == 0   ? &sp->scope[i]
					     : f == 1 ? &sp->cls[i]
						      : &sp->key[i];
			const char *was = *field;
			char *edited;
			fuzz_edit(buf, was, f == 2 ? PROTO_KEY_MAX : PROTO_NAME_MAX);
			*field = buf;
			edited = lease_id_body(sp);
			FUZZ_CHECK(edited == NULL || strcmp(edited, body) != 0);
			free(edited);
			*field = was;
		}
	}
	for (i = 0; i < sp->nreserve; i++) {
		int64_t was = rs[i].n;
		char *edited;
		rs[i].n = was == PROTO_MAX_COST ? was - 1 : was + 1;
		edited = lease_id_body(sp);
		FUZZ_CHECK(edited != NULL && strcmp(edited, body) != 0);
		free(edited);
		rs[i].n = was;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lease_ref ref, again;
	struct meter_tokens rs[PROTO_MAX_TOKENS];
	struct lease_spec sp;
	char *in, *out, *body;
	size_t i;

	if (size > 2 * LEASE_ID_MAX)
		return 0;
	if ((in = malloc(size + 1)) == NULL)
		return 0;
	memcpy(in, data, size);
	in[size] = '\0';
	if (!lease_id_parse(in, &ref)) {
		free(in);
		return 0;
	}
	FUZZ_CHECK(ref.nt >= 1 && ref.nt <= PROTO_MAX_TARGETS);
	FUZZ_CHECK(ref.nreserve <= PROTO_MAX_TOKENS);
	FUZZ_CHECK(strlen(ref.nonce) == LEASE_NONCE_LEN);
	for (i = 0; i < ref.nt; i++) {
		FUZZ_CHECK(ref.t[i].scope[0] != '\0');
		FUZZ_CHECK(strlen(ref.t[i].scope) <= PROTO_NAME_MAX);
		FUZZ_CHECK(strlen(ref.t[i].cls) <= PROTO_NAME_MAX);
		FUZZ_CHECK(strlen(ref.t[i].key) <= PROTO_KEY_MAX);
	}
	for (i = 0; i < ref.nreserve; i++) {
		FUZZ_CHECK(ref.reserve[i].n >= 0);
		rs[i].name = ref.reserve[i].name;
		rs[i].n = ref.reserve[i].n;
	}
	memset(&sp, 0, sizeof(sp));
	sp.nt = ref.nt;
	for (i = 0; i < ref.nt; i++) {
		sp.scope[i] = ref.t[i].scope;
		sp.cls[i] = ref.t[i].cls;
		sp.key[i] = ref.t[i].key;
	}
	sp.reserve = rs;
	sp.nreserve = ref.nreserve;
	body = lease_id_body(&sp);
	FUZZ_CHECK(body != NULL);
	FUZZ_CHECK(strcmp(body, in + LEASE_NONCE_LEN + 1) == 0);
	fuzz_edits(&sp, rs, body);
	free(body);
	out = lease_id_format(&ref);
	FUZZ_CHECK(out != NULL);
	FUZZ_CHECK(strcmp(out, in) == 0); /* canonical: one text per lease */
	FUZZ_CHECK(lease_id_parse(out, &again));
	FUZZ_CHECK(memcmp(&again, &ref, sizeof(ref)) == 0);
	free(out);
	free(in);
	return 0;
}
