/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * proto.h - the protocol codec: one JSON line to a struct request, and
 * reply fields to one JSON line.
 *
 * Owns: struct request (fixed, bounded fields; the id is kept as raw JSON
 * text to echo back) and the reply builder. Never touches a socket or the
 * loop. proto.c decodes with jansson (the only daemon file that includes
 * <jansson.h>); proto_fast.c first tries the flat lines of the hot ops.
 */

#ifndef ADMITD_PROTO_H
#define ADMITD_PROTO_H

#include "admit_proto.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum proto_op {
	OP_ACQUIRE = 0,
	OP_RELEASE,
	OP_PENALIZE,
	OP_STATUS,
	OP_PING,
	OP_RESET,
	OP_INSPECT,
	OP_CANCEL,
	OP_OVERRIDE,
	OP__COUNT
};

#define PROTO_NAME_MAX	      64    /* scope, class, token meter names */
#define PROTO_KEY_MAX	      512   /* keys and hosts */
#define PROTO_LEASE_MAX	      12288 /* lease handles carry their targets: see lease_id.h */
#define PROTO_MAX_TARGETS     8
#define PROTO_MAX_TOKENS      16
#define PROTO_MAX_COST	      1000000000LL
#define PROTO_MAX_TIMEOUT_MS  (24LL * 3600 * 1000)
#define PROTO_MAX_OVERRIDE_MS (30LL * 24 * 3600 * 1000) /* an override's ttl_ms */
#define PROTO_MAX_WEIGHT      1000			/* an override's tenant weight */

struct proto_target {
	char scope[PROTO_NAME_MAX + 1];
	char key[PROTO_KEY_MAX + 1];
	bool has_key; /* "key" or "url" given */
	char cls[PROTO_NAME_MAX + 1];
	bool has_cls;
	int64_t cost; /* default 1 */
};

struct proto_token {
	char name[PROTO_NAME_MAX + 1];
	int64_t n;
};

struct request {
	int op;		 /* enum proto_op; -1 before decoding */
	char *id;	 /* raw JSON text of "id", malloc'd; NULL if none */
	char *of;	 /* cancel: compact JSON of "of" (the acquire's id), malloc'd */
	size_t ntargets; /* acquire, penalize: >= 1 */
	struct proto_target targets[PROTO_MAX_TARGETS];
	bool has_timeout;
	int64_t timeout_ms;
	bool detach;
	bool no_lease; /* acquire: "lease": false, an admission with nothing to release */
	char tenant[PROTO_NAME_MAX +
		    1]; /* acquire, override: "tenant" ([A-Za-z0-9_.-]); "" when absent */
	bool has_tenant;
	char lease[PROTO_LEASE_MAX + 1];
	size_t ntokens;
	struct proto_token tokens[PROTO_MAX_TOKENS];
	int outcome;	 /* release: enum adapt_outcome (ADAPT_NONE when not given) */
	size_t nreserve; /* acquire: token meters reserved up front */
	struct proto_token reserve[PROTO_MAX_TOKENS];
	/* penalize: a relative delay, or an absolute wall-clock instant (HTTP-date) */
	int64_t penalty_ms; /* -1 when given as a date */
	int64_t penalty_until_wall_ms;
	/* override: for ttl_ms, min_delay_ms (-1: not given; 0 in other ops) and rule amounts
	 * (name: a rule's name, or its index in the scope, in decimal) */
	int64_t ov_ttl_ms, ov_min_delay_ms;
	int64_t ov_weight; /* override with "tenant": the tenant's weight (1..1000); else 0 */
	size_t nov;
	struct proto_token ov_rules[PROTO_MAX_TOKENS];
};

/*
 * proto_decode - parse one line (without its newline) into rq. Returns
 * ADMIT_OK, or an error code with a human message in msg. Even on error rq->id
 * is filled when the line was an object with an "id", so the error reply can
 * carry it; the caller always calls proto_request_clear.
 */
enum admit_err proto_decode(const char *line, size_t len, struct request *rq, char *msg,
			    size_t msglen);
void proto_request_clear(struct request *rq);

/*
 * proto_fast_decode - the hand-written decoder of proto_fast.c: true when it
 * decoded the line whole (rq filled as proto_decode would, ADMIT_OK); false
 * when the line is outside its subset, with rq untouched but for what
 * proto_decode resets anyway. proto_decode_general - the jansson decoder
 * alone. Both for proto_decode, the tests and the fuzzer, which compare them.
 */
bool proto_fast_decode(const char *line, size_t len, struct request *rq);
enum admit_err proto_decode_general(const char *line, size_t len, struct request *rq, char *msg,
				    size_t msglen);
/* proto_request_equal - the same request, field by field (what was decoded). */
bool proto_request_equal(const struct request *a, const struct request *b);

/*
 * proto_url_host - the host of an absolute URL, lowercased, without
 * userinfo, port or brackets. false when there is no host.
 */
bool proto_url_host(const char *url, char *host, size_t hostlen);

/*
 * proto_parse_retry_after - an HTTP Retry-After value: delta-seconds ("120")
 * sets *delay_ms; an HTTP-date sets *until_wall_ms (Unix ms) and *delay_ms
 * to -1. false when it is neither.
 */
bool proto_parse_retry_after(const char *s, int64_t *delay_ms, int64_t *until_wall_ms);

/*
 * The reply builder. A reply is an object; fields are added in order;
 * preply_push opens a nested object under a key, preply_pop closes it.
 * preply_finish returns a malloc'd line ending in '\n' (the caller frees it)
 * and frees the builder. Allocation failures yield a minimal error line.
 */
struct preply;
/* id_json: the request's id as the codec wrote it (compact JSON text), or NULL. */
struct preply *preply_new(const char *id_json, bool ok);
struct preply *preply_error(const char *id_json, enum admit_err e, const char *message);
void preply_int(struct preply *r, const char *k, int64_t v);
void preply_str(struct preply *r, const char *k, const char *v);
void preply_bool(struct preply *r, const char *k, bool v);
void preply_double(struct preply *r, const char *k, double v);
void preply_push(struct preply *r, const char *k);
/* preply_list opens an array under a key; preply_item opens an object in it. */
void preply_list(struct preply *r, const char *k);
void preply_item(struct preply *r);
void preply_pop(struct preply *r);
/* preply_free - drop a reply that will not be sent. */
void preply_free(struct preply *r);
char *preply_finish(struct preply *r, size_t *len);

/* preply_spares_free - at exit: free the builders kept for the next reply. */
void preply_spares_free(void);

/* 1 for the bytes a JSON string holds as they are (printable ASCII but '"'
 * and '\\'); the reply's writer and the request's fast decoder use it. */
extern const unsigned char proto_json_plain[256];

#endif
