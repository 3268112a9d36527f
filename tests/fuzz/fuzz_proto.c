/*
 * fuzz_proto.c - libFuzzer target for the protocol codec (daemon/wire/proto*.c).
 *
 * One input is one request line, capped at the default max_line as conn.c
 * would cap it. It is decoded; a decoded request's id is echoed through the
 * reply builder, and the reply must be one JSON object line carrying the
 * same id. The same bytes, as a C string, also go through proto_url_host
 * and proto_parse_retry_after. Where the hand-written decoder takes a line,
 * the jansson decoder must decode it to the same request. Any broken invariant aborts, so libFuzzer
 * keeps the input; ASan and UBSan catch the rest.
 *
 *   make fuzz              (clang; see mk/fuzz.mk)
 */

#include "proto.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                       \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			fprintf(stderr, "fuzz_proto: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                               \
		}                                                                              \
	} while (0)

/* Every bounded field ends inside its buffer. */
static void fuzz_check_request(const struct request *rq)
{
	size_t i;

	FUZZ_CHECK(rq->op >= 0 && rq->op < OP__COUNT);
	FUZZ_CHECK(rq->ntargets <= PROTO_MAX_TARGETS);
	FUZZ_CHECK(rq->ntokens <= PROTO_MAX_TOKENS);
	FUZZ_CHECK(memchr(rq->lease, '\0', sizeof(rq->lease)) != NULL);
	for (i = 0; i < rq->ntargets; i++) {
		const struct proto_target *t = &rq->targets[i];
		FUZZ_CHECK(memchr(t->scope, '\0', sizeof(t->scope)) != NULL);
		FUZZ_CHECK(memchr(t->key, '\0', sizeof(t->key)) != NULL);
		FUZZ_CHECK(memchr(t->cls, '\0', sizeof(t->cls)) != NULL);
		FUZZ_CHECK(t->scope[0] != '\0');
		FUZZ_CHECK(t->cost >= 0 && t->cost <= PROTO_MAX_COST);
	}
	for (i = 0; i < rq->ntokens; i++) {
		FUZZ_CHECK(memchr(rq->tokens[i].name, '\0', sizeof(rq->tokens[i].name)) != NULL);
		FUZZ_CHECK(rq->tokens[i].n >= 0 && rq->tokens[i].n <= PROTO_MAX_COST);
	}
	FUZZ_CHECK(!rq->has_timeout ||
		   (rq->timeout_ms >= 0 && rq->timeout_ms <= PROTO_MAX_TIMEOUT_MS));
	if (rq->op == OP_PENALIZE)
		FUZZ_CHECK(rq->penalty_ms >= -1 && rq->penalty_ms <= PROTO_MAX_TIMEOUT_MS);
}

/*
 * The message as sent: msg itself, or, when msg is not valid UTF-8, msg with
 * every non-ASCII byte replaced by '?' (what preply_str does).
 */
static int fuzz_same_text(const char *sent, const char *msg)
{
	size_t i;

	if (strcmp(sent, msg) == 0)
		return 1;
	if (strlen(sent) != strlen(msg))
		return 0;
	for (i = 0; msg[i]; i++) {
		char want = (unsigned char)msg[i] >= 0x80 ? '?' : msg[i];
		if (sent[i] != want)
			return 0;
	}
	return 1;
}

/*
 * The reply ops.c sends for this request echoes its id, carries the decode
 * error and its message, and is one JSON object line.
 */
static void fuzz_check_reply(const struct request *rq, enum admit_err e, const char *msg)
{
	struct preply *r = e == ADMIT_OK ? preply_new(rq->id, true) : preply_error(rq->id, e, msg);
	json_t *j, *want;
	size_t len = 0;
	char *line;

	line = preply_finish(r, &len);
	FUZZ_CHECK(line != NULL && len > 0 && line[len - 1] == '\n');
	FUZZ_CHECK(memchr(line, '\n', len - 1) == NULL);
	j = json_loadb(line, len - 1, JSON_REJECT_DUPLICATES, NULL);
	FUZZ_CHECK(json_is_object(j));
	FUZZ_CHECK(json_is_boolean(json_object_get(j, "ok")));
	FUZZ_CHECK(json_is_true(json_object_get(j, "ok")) == (e == ADMIT_OK));
	if (e != ADMIT_OK) {
		const char *err = json_string_value(json_object_get(j, "error"));
		const char *m = json_string_value(json_object_get(j, "message"));
		FUZZ_CHECK(err != NULL && strcmp(err, admit_err_str(e)) == 0);
		FUZZ_CHECK(m != NULL && fuzz_same_text(m, msg));
	}
	if (rq->id != NULL) {
		want = json_loads(rq->id, JSON_DECODE_ANY, NULL);
		FUZZ_CHECK(want != NULL);
		FUZZ_CHECK(json_equal(json_object_get(j, "id"), want));
		json_decref(want);
	}
	json_decref(j);
	free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct request rq;
	char msg[256];
	char *s;
	enum admit_err e;
	int64_t delay = 0, until = 0;

	if (size > ADMIT_DEFAULT_MAX_LINE)
		size = ADMIT_DEFAULT_MAX_LINE;

	msg[0] = '\0';
	e = proto_decode((const char *)data, size, &rq, msg, sizeof(msg));
	FUZZ_CHECK(e == ADMIT_OK || e == ADMIT_E_BAD_REQUEST || e == ADMIT_E_UNKNOWN_OP);
	FUZZ_CHECK(e == ADMIT_OK || msg[0] != '\0');
	if (e == ADMIT_OK)
		fuzz_check_request(&rq);
	fuzz_check_reply(&rq, e, msg);
	proto_request_clear(&rq);
	{
		struct request f, g;
		char gmsg[256];
		memset(&f, 0, sizeof(f));
		f.op = -1;
		if (proto_fast_decode((const char *)data, size, &f)) {
			FUZZ_CHECK(proto_decode_general((const char *)data, size, &g, gmsg,
							sizeof(gmsg)) == ADMIT_OK);
			FUZZ_CHECK(proto_request_equal(&f, &g));
			proto_request_clear(&g);
		}
		proto_request_clear(&f);
	}

	/* the value parsers take C strings: stop at the first NUL */
	s = malloc(size + 1);
	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	{
		char host[PROTO_KEY_MAX + 1];
		if (proto_url_host(s, host, sizeof(host)))
			FUZZ_CHECK(host[0] != '\0' && strlen(host) <= PROTO_KEY_MAX);
	}
	if (proto_parse_retry_after(s, &delay, &until))
		FUZZ_CHECK(delay == -1 || (delay >= 0 && delay <= PROTO_MAX_TIMEOUT_MS));
	free(s);
	return 0;
}
