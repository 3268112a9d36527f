/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * proto.c - the protocol codec's decoder (see proto/PROTOCOL.md).
 *
 * Owns: decoding one line into struct request, comparing and clearing a
 * decoded request. Types and ranges are checked here; meaning (does the scope
 * exist?) is checked by the ops. Unknown fields are ignored so that older
 * daemons accept newer clients. The replies are built by proto_reply.c.
 */

#include "proto.h"

#include "adaptive.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const proto_op_names[OP__COUNT] = {
	[OP_ACQUIRE] = "acquire", [OP_RELEASE] = "release", [OP_PENALIZE] = "penalize",
	[OP_RESET] = "reset",	  [OP_INSPECT] = "inspect", [OP_STATUS] = "status",
	[OP_PING] = "ping",	  [OP_CANCEL] = "cancel",   [OP_OVERRIDE] = "override",
};

/* ---- decoding ---- */

#define PROTO_FAIL(code, ...)                       \
	do {                                        \
		snprintf(msg, msglen, __VA_ARGS__); \
		return (code);                      \
	} while (0)

/* Copy a bounded string field; absent is fine, a wrong type or size is not. */
static enum admit_err proto_str(json_t *o, const char *k, char *dst, size_t cap, bool *has,
				char *msg, size_t msglen)
{
	json_t *v = json_object_get(o, k);
	size_t n;

	if (has)
		*has = false;
	if (v == NULL || json_is_null(v))
		return ADMIT_OK;
	if (!json_is_string(v))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" must be a string", k);
	n = json_string_length(v);
	if (n == 0)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" must not be empty", k);
	if (n >= cap)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" longer than %zu bytes", k, cap - 1);
	if (memchr(json_string_value(v), '\0', n) != NULL)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" contains a NUL byte", k);
	memcpy(dst, json_string_value(v), n + 1);
	if (has)
		*has = true;
	return ADMIT_OK;
}

/*
 * An integer field in min..max; absent is fine. unit names what the number
 * counts ("ms" for a duration, NULL for a count), so that a refusal states
 * the limit in the unit the field was given in.
 */
static enum admit_err proto_int(json_t *o, const char *k, int64_t min, int64_t max,
				const char *unit, int64_t *dst, bool *has, char *msg, size_t msglen)
{
	json_t *v = json_object_get(o, k);

	if (has)
		*has = false;
	if (v == NULL || json_is_null(v))
		return ADMIT_OK;
	if (!json_is_integer(v))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" must be an integer", k);
	if (json_integer_value(v) < min || json_integer_value(v) > max)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" must be between %lld and %lld%s%s", k,
			   (long long)min, (long long)max, unit ? " " : "", unit ? unit : "");
	*dst = json_integer_value(v);
	if (has)
		*has = true;
	return ADMIT_OK;
}

#define PROTO_TRY(expr)                     \
	do {                                \
		enum admit_err e_ = (expr); \
		if (e_ != ADMIT_OK)         \
			return e_;          \
	} while (0)

/* One target: scope, key or url, class, cost. */
static enum admit_err proto_target(json_t *o, struct proto_target *t, char *msg, size_t msglen)
{
	bool has_scope, has_url;
	char url[PROTO_KEY_MAX * 4 + 1];

	t->key[0] = t->cls[0] = '\0';
	PROTO_TRY(proto_str(o, "scope", t->scope, sizeof(t->scope), &has_scope, msg, msglen));
	if (!has_scope)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"scope\" is required");
	PROTO_TRY(proto_str(o, "key", t->key, sizeof(t->key), &t->has_key, msg, msglen));
	PROTO_TRY(proto_str(o, "url", url, sizeof(url), &has_url, msg, msglen));
	if (has_url && t->has_key)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "give \"key\" or \"url\", not both");
	if (has_url) {
		if (!proto_url_host(url, t->key, sizeof(t->key)))
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"url\" has no host");
		t->has_key = true;
	}
	PROTO_TRY(proto_str(o, "class", t->cls, sizeof(t->cls), &t->has_cls, msg, msglen));
	t->cost = 1;
	PROTO_TRY(proto_int(o, "cost", 0, PROTO_MAX_COST, NULL, &t->cost, NULL, msg, msglen));
	return ADMIT_OK;
}

static enum admit_err proto_targets(json_t *root, struct request *rq, char *msg, size_t msglen)
{
	json_t *arr = json_object_get(root, "targets");
	size_t i;

	if (arr == NULL || json_is_null(arr)) {
		rq->ntargets = 1;
		return proto_target(root, &rq->targets[0], msg, msglen);
	}
	if (!json_is_array(arr) || json_array_size(arr) == 0)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"targets\" must be a non-empty array");
	if (json_array_size(arr) > PROTO_MAX_TARGETS)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "at most %d targets", PROTO_MAX_TARGETS);
	for (i = 0; i < json_array_size(arr); i++) {
		json_t *t = json_array_get(arr, i);
		if (!json_is_object(t))
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "each target must be an object");
		PROTO_TRY(proto_target(t, &rq->targets[i], msg, msglen));
	}
	rq->ntargets = i;
	return ADMIT_OK;
}

/* "outcome" of a release: what the upstream said of the call the lease covered. */
static enum admit_err proto_outcome(json_t *root, struct request *rq, char *msg, size_t msglen)
{
	json_t *o = json_object_get(root, "outcome");
	int v;

	if (o == NULL)
		return ADMIT_OK;
	if (!json_is_string(o) || (v = adapt_outcome_parse(json_string_value(o))) < 0)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "\"outcome\" must be \"ok\", \"limited\" or \"error\"");
	rq->outcome = v;
	return ADMIT_OK;
}

/* The words of a name -> count object's errors: token counts, rule amounts. */
struct proto_counts {
	const char *of, *name, *count;
	int64_t min;
};
static const struct proto_counts proto_tokens_of = { "counts", "token meter name", "token count",
						     0 };
static const struct proto_counts proto_rules_of = { "amounts", "rule name", "rule amount", 1 };

/* "tokens" of a release, "reserve" of an acquire (meter name -> count), "rules" of an override. */
static enum admit_err proto_counts(json_t *root, const char *field, const struct proto_counts *w,
				   struct proto_token *out, size_t *nout, char *msg, size_t msglen)
{
	json_t *obj = json_object_get(root, field), *v;
	const char *k;

	if (obj == NULL || json_is_null(obj))
		return ADMIT_OK;
	if (!json_is_object(obj))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" must be an object of %s", field, w->of);
	if (json_object_size(obj) > PROTO_MAX_TOKENS)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "at most %d %ss", PROTO_MAX_TOKENS, w->count);
	json_object_foreach (obj, k, v) {
		struct proto_token *t = &out[*nout];
		if (strlen(k) == 0 || strlen(k) > PROTO_NAME_MAX)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "bad %s", w->name);
		if (!json_is_integer(v) || json_integer_value(v) < w->min ||
		    json_integer_value(v) > PROTO_MAX_COST)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "%s \"%s\" must be an integer %lld..%lld",
				   w->count, k, (long long)w->min, PROTO_MAX_COST);
		strcpy(t->name, k);
		t->n = json_integer_value(v);
		(*nout)++;
	}
	return ADMIT_OK;
}

static enum admit_err proto_penalty(json_t *root, struct request *rq, char *msg, size_t msglen)
{
	json_t *ra = json_object_get(root, "retry_after");
	bool has_ms;

	PROTO_TRY(proto_int(root, "retry_after_ms", 0, PROTO_MAX_TIMEOUT_MS, "ms", &rq->penalty_ms,
			    &has_ms, msg, msglen));
	if (has_ms)
		return ADMIT_OK;
	if (ra == NULL || json_is_null(ra))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "\"retry_after_ms\" or \"retry_after\" is required");
	if (json_is_integer(ra) && json_integer_value(ra) >= 0) {
		/* An upstream's hold beyond the cap holds for the cap. */
		rq->penalty_ms = json_integer_value(ra) > PROTO_MAX_TIMEOUT_MS / 1000
				     ? PROTO_MAX_TIMEOUT_MS
				     : json_integer_value(ra) * 1000;
		return ADMIT_OK;
	}
	if (!json_is_string(ra) || !proto_parse_retry_after(json_string_value(ra), &rq->penalty_ms,
							    &rq->penalty_until_wall_ms))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "\"retry_after\" must be delta-seconds or an HTTP-date");
	return ADMIT_OK;
}

static enum admit_err proto_tenant(json_t *root, struct request *rq, char *msg, size_t msglen);

/* An override's "tenant" and "weight": one tenant's weight, and nothing else. */
static enum admit_err proto_override_tenant(json_t *root, struct request *rq, bool has_delay,
					    char *msg, size_t msglen)
{
	bool has_weight;

	PROTO_TRY(proto_tenant(root, rq, msg, msglen));
	PROTO_TRY(proto_int(root, "weight", 1, PROTO_MAX_WEIGHT, NULL, &rq->ov_weight, &has_weight,
			    msg, msglen));
	if (has_weight != rq->has_tenant)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "\"tenant\" and \"weight\" go together (a tenant's weight on the key)");
	if (rq->has_tenant && (has_delay || rq->nov > 0))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "a tenant's weight is set alone: \"min_delay_ms\" and \"rules\" are "
			   "another override");
	return ADMIT_OK;
}

/*
 * override: one target, its ttl, and a min_delay and rule amounts (at least
 * one of these), or one tenant's weight.
 */
static enum admit_err proto_override(json_t *root, struct request *rq, char *msg, size_t msglen)
{
	bool has_ttl, has_delay;

	PROTO_TRY(proto_targets(root, rq, msg, msglen));
	if (rq->ntargets != 1)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "one scope and key");
	PROTO_TRY(proto_int(root, "ttl_ms", 1, PROTO_MAX_OVERRIDE_MS, "ms", &rq->ov_ttl_ms,
			    &has_ttl, msg, msglen));
	if (!has_ttl)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "\"ttl_ms\" (how long the override holds) is required");
	PROTO_TRY(proto_int(root, "min_delay_ms", 0, PROTO_MAX_TIMEOUT_MS, "ms",
			    &rq->ov_min_delay_ms, &has_delay, msg, msglen));
	if (!has_delay)
		rq->ov_min_delay_ms = -1;
	PROTO_TRY(
	    proto_counts(root, "rules", &proto_rules_of, rq->ov_rules, &rq->nov, msg, msglen));
	PROTO_TRY(proto_override_tenant(root, rq, has_delay, msg, msglen));
	if (!has_delay && rq->nov == 0 && !rq->has_tenant)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "give \"min_delay_ms\" or \"rules\", or \"tenant\" and \"weight\" (what "
			   "the override sets)");
	return ADMIT_OK;
}

/* An acquire's "lease": true (the default) or false, which detach cannot go with. */
static enum admit_err proto_no_lease(json_t *root, struct request *rq, char *msg, size_t msglen)
{
	json_t *ls = json_object_get(root, "lease");

	if (ls != NULL && !json_is_null(ls) && !json_is_boolean(ls))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "\"lease\" in an acquire must be true or false (false: nothing to "
			   "release)");
	rq->no_lease = ls != NULL && json_is_false(ls);
	if (rq->no_lease && rq->detach)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "\"detach\" keeps a lease past its connection: it cannot go with "
			   "\"lease\": false");
	return ADMIT_OK;
}

/* An acquire's "tenant": 1 to 64 of [A-Za-z0-9_.-]; absent: the default tenant. */
static enum admit_err proto_tenant(json_t *root, struct request *rq, char *msg, size_t msglen)
{
	const char *p;

	PROTO_TRY(proto_str(root, "tenant", rq->tenant, sizeof(rq->tenant), &rq->has_tenant, msg,
			    msglen));
	for (p = rq->tenant; rq->has_tenant && *p != '\0'; p++)
		if (!isalnum((unsigned char)*p) && strchr("_.-", *p) == NULL)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST,
				   "\"tenant\" must be 1 to %d of A-Z a-z 0-9 _ . -",
				   PROTO_NAME_MAX);
	return ADMIT_OK;
}

static enum admit_err proto_decode_obj(json_t *root, struct request *rq, char *msg, size_t msglen)
{
	json_t *op = json_object_get(root, "op"), *id = json_object_get(root, "id");
	json_t *det, *of;
	bool has_lease;
	int i;

	if (id != NULL) {
		rq->id = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
		if (rq->id == NULL)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "unusable \"id\"");
	}
	if (op == NULL || !json_is_string(op))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"op\" (a string) is required");
	for (i = 0; i < OP__COUNT; i++)
		if (strcmp(json_string_value(op), proto_op_names[i]) == 0)
			rq->op = i;
	switch (rq->op) {
	case OP_ACQUIRE:
		PROTO_TRY(proto_targets(root, rq, msg, msglen));
		PROTO_TRY(proto_int(root, "timeout_ms", 0, PROTO_MAX_TIMEOUT_MS, "ms",
				    &rq->timeout_ms, &rq->has_timeout, msg, msglen));
		det = json_object_get(root, "detach");
		if (det != NULL && !json_is_null(det) && !json_is_boolean(det))
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"detach\" must be true or false");
		rq->detach = det != NULL && json_is_true(det);
		PROTO_TRY(proto_no_lease(root, rq, msg, msglen));
		PROTO_TRY(proto_tenant(root, rq, msg, msglen));
		PROTO_TRY(proto_counts(root, "reserve", &proto_tokens_of, rq->reserve,
				       &rq->nreserve, msg, msglen));
		if (rq->no_lease && rq->nreserve > 0)
			PROTO_FAIL(
			    ADMIT_E_BAD_REQUEST,
			    "a reservation is settled at release: \"reserve\" needs a lease");
		return ADMIT_OK;
	case OP_RELEASE:
		PROTO_TRY(proto_str(root, "lease", rq->lease, sizeof(rq->lease), &has_lease, msg,
				    msglen));
		if (!has_lease)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"lease\" is required");
		PROTO_TRY(proto_outcome(root, rq, msg, msglen));
		return proto_counts(root, "tokens", &proto_tokens_of, rq->tokens, &rq->ntokens, msg,
				    msglen);
	case OP_PENALIZE:
		PROTO_TRY(proto_targets(root, rq, msg, msglen));
		return proto_penalty(root, rq, msg, msglen);
	case OP_RESET:
	case OP_INSPECT:
		PROTO_TRY(proto_targets(root, rq, msg, msglen));
		if (rq->ntargets != 1)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "one scope and key");
		return ADMIT_OK;
	case OP_CANCEL:
		if ((of = json_object_get(root, "of")) == NULL || json_is_null(of))
			PROTO_FAIL(ADMIT_E_BAD_REQUEST,
				   "\"of\" (the id of the acquire to cancel) is required");
		rq->of = json_dumps(of, JSON_COMPACT | JSON_ENCODE_ANY);
		if (rq->of == NULL)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "unusable \"of\"");
		return ADMIT_OK;
	case OP_OVERRIDE: return proto_override(root, rq, msg, msglen);
	case OP_STATUS:
	case OP_PING: return ADMIT_OK;
	default: PROTO_FAIL(ADMIT_E_UNKNOWN_OP, "unknown op \"%.64s\"", json_string_value(op));
	}
}

static void proto_request_init(struct request *rq)
{
	/* Scalars and counts only: the buffers (18 KB of them) are filled when
	 * their field is present, and read only then (has_*, counts). */
	rq->op = -1;
	rq->id = NULL;
	rq->of = NULL;
	rq->ntargets = 0;
	rq->has_timeout = false;
	rq->timeout_ms = 0;
	rq->detach = false;
	rq->no_lease = false;
	rq->tenant[0] = '\0';
	rq->has_tenant = false;
	rq->lease[0] = '\0';
	rq->ntokens = 0;
	rq->outcome = ADAPT_NONE;
	rq->nreserve = 0;
	rq->penalty_ms = 0;
	rq->penalty_until_wall_ms = 0;
	rq->ov_ttl_ms = 0;
	rq->ov_min_delay_ms = 0; /* an override without it: -1 */
	rq->ov_weight = 0;
	rq->nov = 0;
}

/* Does the integer token d[0..n) (digits, after an optional '-') fit int64? */
static bool proto_fits_int64(const char *d, size_t n, bool neg)
{
	const char *lim = neg ? "9223372036854775808" : "9223372036854775807";

	while (n > 1 && *d == '0') { /* invalid JSON anyway; jansson says so */
		d++;
		n--;
	}
	return n < 19 || (n == 19 && memcmp(d, lim, 19) <= 0);
}

/*
 * jansson refuses a whole line for one integer beyond int64 (cost=2**63
 * from Python), so neither its id nor the field at fault would be known.
 * proto_clamp copies the line with every such integer outside a string
 * clamped to INT64_MIN or INT64_MAX, which no field's range admits: decoded
 * again, the copy is refused for the right field, with its id. *id_hit is
 * set when a clamped integer was inside the top-level "id" (or a member
 * whose name has an escape, which may spell "id"): that id cannot be echoed
 * unchanged. Returns the malloc'd copy (same length or shorter), or NULL
 * when there was nothing to clamp (or no memory).
 */
static char *proto_clamp(const char *line, size_t len, size_t *outlen, bool *id_hit)
{
	char *out = malloc(len + 1), *o = out;
	const char *p = line, *end = line + len;
	bool clamped = false, key_next = false, in_id = false;
	int depth = 0;

	*id_hit = false;
	if (out == NULL)
		return NULL;
	while (p < end) {
		if (*p == '"') {
			const char *q = p + 1;
			bool esc = false;

			while (q < end && *q != '"') {
				if (*q == '\\' && q + 1 < end) {
					esc = true;
					q++;
				}
				q++;
			}
			q = q < end ? q + 1 : end;
			if (depth == 1 && key_next) {
				in_id = esc || (q - p == 4 && memcmp(p, "\"id\"", 4) == 0);
				key_next = false;
			}
			memcpy(o, p, (size_t)(q - p));
			o += q - p;
			p = q;
		} else if (*p == '-' || (*p >= '0' && *p <= '9')) {
			const char *d = *p == '-' ? p + 1 : p, *q = d;

			while (q < end && *q >= '0' && *q <= '9')
				q++;
			if (q > d && (q == end || (*q != '.' && *q != 'e' && *q != 'E')) &&
			    !proto_fits_int64(d, (size_t)(q - d), *p == '-')) {
				const char *v =
				    *p == '-' ? "-9223372036854775808" : "9223372036854775807";

				memcpy(o, v, strlen(v));
				o += strlen(v);
				clamped = true;
				*id_hit = *id_hit || in_id;
			} else {
				memcpy(o, p, (size_t)(q - p));
				o += q - p;
			}
			p = q == p ? p + 1 : q;
		} else {
			if (*p == '{' || *p == '[')
				depth++;
			else if (*p == '}' || *p == ']')
				depth--;
			if ((*p == '{' || *p == ',') && depth == 1)
				key_next = true;
			*o++ = *p++;
		}
	}
	if (!clamped) {
		free(out);
		return NULL;
	}
	*o = '\0';
	*outlen = (size_t)(o - out);
	return out;
}

enum admit_err proto_decode_general(const char *line, size_t len, struct request *rq, char *msg,
				    size_t msglen)
{
	json_error_t jerr;
	json_t *root;
	enum admit_err e;
	char *clamped = NULL;
	size_t clen;
	bool id_hit = false;

	proto_request_init(rq);
	root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL && (clamped = proto_clamp(line, len, &clen, &id_hit)) != NULL) {
		json_error_t jerr2;

		root = json_loadb(clamped, clen, JSON_REJECT_DUPLICATES, &jerr2);
		free(clamped);
	}
	if (root == NULL)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "invalid JSON: %s", jerr.text);
	if (!json_is_object(root)) {
		json_decref(root);
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "a request must be a JSON object");
	}
	e = proto_decode_obj(root, rq, msg, msglen);
	json_decref(root);
	if (id_hit) {
		/* a clamped id would be echoed as another value than the one sent */
		free(rq->id);
		rq->id = NULL;
		if (e == ADMIT_OK)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST,
				   "\"id\": an integer beyond 64 bits cannot be echoed");
	}
	return e;
}

enum admit_err proto_decode(const char *line, size_t len, struct request *rq, char *msg,
			    size_t msglen)
{
	proto_request_init(rq);
	if (proto_fast_decode(line, len, rq))
		return ADMIT_OK;
	return proto_decode_general(line, len, rq, msg, msglen);
}

static bool proto_target_equal(const struct proto_target *a, const struct proto_target *b)
{
	return strcmp(a->scope, b->scope) == 0 && a->has_key == b->has_key &&
	       strcmp(a->key, b->key) == 0 && a->has_cls == b->has_cls &&
	       strcmp(a->cls, b->cls) == 0 && a->cost == b->cost;
}

bool proto_request_equal(const struct request *a, const struct request *b)
{
	size_t i;

	if (a->op != b->op || (a->id == NULL) != (b->id == NULL) ||
	    (a->id != NULL && strcmp(a->id, b->id) != 0) || (a->of == NULL) != (b->of == NULL) ||
	    (a->of != NULL && strcmp(a->of, b->of) != 0) || a->ntargets != b->ntargets ||
	    a->has_timeout != b->has_timeout || a->timeout_ms != b->timeout_ms ||
	    a->detach != b->detach || a->no_lease != b->no_lease ||
	    a->has_tenant != b->has_tenant || strcmp(a->tenant, b->tenant) != 0 ||
	    strcmp(a->lease, b->lease) != 0 || a->ntokens != b->ntokens ||
	    a->outcome != b->outcome || a->nreserve != b->nreserve ||
	    a->penalty_ms != b->penalty_ms ||
	    a->penalty_until_wall_ms != b->penalty_until_wall_ms || a->ov_ttl_ms != b->ov_ttl_ms ||
	    a->ov_min_delay_ms != b->ov_min_delay_ms || a->ov_weight != b->ov_weight ||
	    a->nov != b->nov)
		return false;
	for (i = 0; i < a->ntargets; i++)
		if (!proto_target_equal(&a->targets[i], &b->targets[i]))
			return false;
	for (i = 0; i < a->ntokens; i++)
		if (strcmp(a->tokens[i].name, b->tokens[i].name) != 0 ||
		    a->tokens[i].n != b->tokens[i].n)
			return false;
	for (i = 0; i < a->nreserve; i++)
		if (strcmp(a->reserve[i].name, b->reserve[i].name) != 0 ||
		    a->reserve[i].n != b->reserve[i].n)
			return false;
	for (i = 0; i < a->nov; i++)
		if (strcmp(a->ov_rules[i].name, b->ov_rules[i].name) != 0 ||
		    a->ov_rules[i].n != b->ov_rules[i].n)
			return false;
	return true;
}

void proto_request_clear(struct request *rq)
{
	free(rq->id);
	rq->id = NULL;
	free(rq->of);
	rq->of = NULL;
}
