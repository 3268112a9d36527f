/*
 * fuzz_lease_id.c - libFuzzer target for the lease handle decoder
 * (daemon/lease_id.c), the bytes a client sends back in a release.
 *
 * An input is one handle. When lease_id_parse takes it, it must be in the
 * one canonical form: lease_id_format of what was parsed gives the same
 * bytes back, and parsing that again gives the same parse. Every field the
 * parse fills must end inside its buffer, and the reservation's claim
 * (lease_id_claim) must fit LEASE_ID_CLAIM_MAX. Any broken invariant
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lease_ref ref, again;
	struct meter_tokens rs[PROTO_MAX_TOKENS];
	char claim[LEASE_ID_CLAIM_MAX];
	char *in, *out;
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
	lease_id_claim(rs, ref.nreserve, claim, sizeof(claim));
	FUZZ_CHECK(strlen(claim) < sizeof(claim));
	out = lease_id_format(&ref);
	FUZZ_CHECK(out != NULL);
	FUZZ_CHECK(strcmp(out, in) == 0); /* canonical: one text per lease */
	FUZZ_CHECK(lease_id_parse(out, &again));
	FUZZ_CHECK(memcmp(&again, &ref, sizeof(ref)) == 0);
	free(out);
	free(in);
	return 0;
}
