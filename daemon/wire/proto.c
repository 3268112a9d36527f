/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * proto.c - the protocol codec (see proto/PROTOCOL.md).
 *
 * Owns: decoding one line into struct request, and the reply builder.
 * Types and ranges are checked here; meaning (does the scope exist?) is
 * checked by ops.c. Unknown fields are ignored so that older daemons accept
 * newer clients.
 */

#include "proto.h"

#include "adaptive.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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

/* override: one target, its ttl, a min_delay and rule amounts (at least one of these). */
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
	if (!has_delay && rq->nov == 0)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST,
			   "give \"min_delay_ms\" or \"rules\" (what the override sets)");
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
	rq->lease[0] = '\0';
	rq->ntokens = 0;
	rq->outcome = ADAPT_NONE;
	rq->nreserve = 0;
	rq->penalty_ms = 0;
	rq->penalty_until_wall_ms = 0;
	rq->ov_ttl_ms = 0;
	rq->ov_min_delay_ms = 0; /* an override without it: -1 */
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
	    strcmp(a->lease, b->lease) != 0 || a->ntokens != b->ntokens ||
	    a->outcome != b->outcome || a->nreserve != b->nreserve ||
	    a->penalty_ms != b->penalty_ms ||
	    a->penalty_until_wall_ms != b->penalty_until_wall_ms || a->ov_ttl_ms != b->ov_ttl_ms ||
	    a->ov_min_delay_ms != b->ov_min_delay_ms || a->nov != b->nov)
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

bool proto_url_host(const char *url, char *host, size_t hostlen)
{
	const char *p = strstr(url, "://"), *end, *at;
	size_t n, i;

	p = p ? p + 3 : (strncmp(url, "//", 2) == 0 ? url + 2 : NULL);
	if (p == NULL)
		return false;
	end = p + strcspn(p, "/?#");
	at = memchr(p, '@', (size_t)(end - p));
	while (at != NULL) { /* the host follows the last '@' of the authority */
		p = at + 1;
		at = memchr(p, '@', (size_t)(end - p));
	}
	if (*p == '[') {
		const char *rb = memchr(p, ']', (size_t)(end - p));
		if (rb == NULL)
			return false;
		p++;
		end = rb;
	} else {
		const char *colon = memchr(p, ':', (size_t)(end - p));
		if (colon)
			end = colon;
	}
	n = (size_t)(end - p);
	if (n == 0 || n >= hostlen)
		return false;
	for (i = 0; i < n; i++)
		host[i] = (char)tolower((unsigned char)p[i]);
	host[n] = '\0';
	return true;
}

bool proto_parse_retry_after(const char *s, int64_t *delay_ms, int64_t *until_wall_ms)
{
	static const char *const fmts[] = {
		"%a, %d %b %Y %H:%M:%S GMT", /* IMF-fixdate, RFC 9110 preferred */
		"%A, %d-%b-%y %H:%M:%S GMT", /* obsolete RFC 850 */
		"%a %b %e %H:%M:%S %Y",	     /* obsolete asctime */
	};
	struct tm tm;
	size_t i;
	char *end;
	long long v;

	while (isspace((unsigned char)*s))
		s++;
	if (isdigit((unsigned char)*s)) {
		v = strtoll(s, &end, 10);
		while (isspace((unsigned char)*end))
			end++;
		if (*end != '\0' || v < 0)
			return false;
		/* strtoll saturates on overflow; the cap applies either way */
		*delay_ms = v > PROTO_MAX_TIMEOUT_MS / 1000 ? PROTO_MAX_TIMEOUT_MS : v * 1000;
		return true;
	}
	for (i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		const char *rest;
		memset(&tm, 0, sizeof(tm));
		rest = strptime(s, fmts[i], &tm);
		if (rest != NULL && *rest == '\0') {
			*delay_ms = -1;
			*until_wall_ms = (int64_t)timegm(&tm) * 1000;
			return true;
		}
	}
	return false;
}

/* ---- the reply builder ---- */

/*
 * Replies are written straight into one growing buffer, in the order fields
 * are added: no tree, no second pass. Keys are the daemon's own literals and
 * never repeat within an object. A string that is not valid UTF-8 (a message
 * quoting client bytes cut at a length limit, say) is written with every
 * non-ASCII byte as '?', rather than losing the whole reply.
 */
#define PREPLY_DEPTH 6

struct preply {
	char *buf;
	size_t len, cap;
	int depth;
	bool first[PREPLY_DEPTH]; /* no member written yet at this level */
	bool array[PREPLY_DEPTH]; /* this level is an array */
	bool failed;		  /* an allocation failed: finish emits a fixed error */
};

static bool preply_room(struct preply *r, size_t more)
{
	char *nb;
	size_t ncap;

	if (r->failed)
		return false;
	if (r->len + more + 3 <= r->cap) /* + "}\n\0" at finish */
		return true;
	ncap = r->cap ? r->cap : 256;
	while (ncap < r->len + more + 3)
		ncap *= 2;
	nb = realloc(r->buf, ncap);
	if (nb == NULL) {
		r->failed = true;
		return false;
	}
	r->buf = nb;
	r->cap = ncap;
	return true;
}

static void preply_raw(struct preply *r, const char *s, size_t n)
{
	if (preply_room(r, n)) {
		memcpy(r->buf + r->len, s, n);
		r->len += n;
	}
}

/* The length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t preply_utf8(const unsigned char *s)
{
	size_t n, i;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
	else
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static void preply_string(struct preply *r, const char *v)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)(v ? v : "");
	bool valid = true;
	size_t i, n;

	/* Most strings (names, keys, lease handles) are printable ASCII with
	 * nothing to escape: copied as they are. */
	for (n = 0; s[n] >= 0x20 && s[n] < 0x7f && s[n] != '"' && s[n] != '\\'; n++)
		;
	if (s[n] == '\0') {
		if (preply_room(r, n + 2)) {
			r->buf[r->len++] = '"';
			memcpy(r->buf + r->len, s, n);
			r->len += n;
			r->buf[r->len++] = '"';
		}
		return;
	}
	for (i = 0; s[i] != '\0'; i += n)
		if ((n = preply_utf8(s + i)) == 0) {
			valid = false;
			break;
		}
	if (!preply_room(r, 2 + 6 * strlen((const char *)s)))
		return;
	r->buf[r->len++] = '"';
	for (i = 0; s[i] != '\0'; i++) {
		unsigned char ch = s[i];
		if (ch == '"' || ch == '\\') {
			r->buf[r->len++] = '\\';
			r->buf[r->len++] = (char)ch;
		} else if (ch < 0x20) {
			static const char esc[] = "btn?fr"; /* \b \t \n \v(no) \f \r */
			if (ch >= 8 && ch <= 13 && ch != 11) {
				r->buf[r->len++] = '\\';
				r->buf[r->len++] = esc[ch - 8];
			} else {
				memcpy(r->buf + r->len, "\\u00", 4);
				r->len += 4;
				r->buf[r->len++] = hex[ch >> 4];
				r->buf[r->len++] = hex[ch & 15];
			}
		} else if (ch >= 0x80 && !valid) {
			r->buf[r->len++] = '?';
		} else {
			r->buf[r->len++] = (char)ch;
		}
	}
	r->buf[r->len++] = '"';
}

/* Start a member: the comma, and "key": unless in an array. */
static bool preply_key(struct preply *r, const char *k)
{
	if (r == NULL || r->failed)
		return false;
	if (!r->first[r->depth])
		preply_raw(r, ",", 1);
	r->first[r->depth] = false;
	if (!r->array[r->depth]) {
		preply_string(r, k);
		preply_raw(r, ":", 1);
	}
	return !r->failed;
}

struct preply *preply_new(const char *id_json, bool ok)
{
	struct preply *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->first[0] = true;
	preply_raw(r, "{", 1);
	preply_bool(r, "ok", ok);
	/* The id is the codec's compact JSON text of the request's id, pasted as
	 * is; a line break in it would split the reply line. */
	if (id_json != NULL && strpbrk(id_json, "\r\n") != NULL)
		r->failed = true;
	else if (id_json != NULL && preply_key(r, "id"))
		preply_raw(r, id_json, strlen(id_json));
	return r;
}

struct preply *preply_error(const char *id_json, enum admit_err e, const char *message)
{
	struct preply *r = preply_new(id_json, false);

	if (r == NULL)
		return NULL;
	preply_str(r, "error", admit_err_str(e));
	preply_str(r, "message", message ? message : admit_err_msg(e));
	return r;
}

void preply_int(struct preply *r, const char *k, int64_t v)
{
	char num[24], *p = num + sizeof(num);
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

	if (!preply_key(r, k))
		return;
	do
		*--p = (char)('0' + u % 10);
	while ((u /= 10) != 0);
	if (v < 0)
		*--p = '-';
	preply_raw(r, p, (size_t)(num + sizeof(num) - p));
}

void preply_str(struct preply *r, const char *k, const char *v)
{
	if (preply_key(r, k)) {
		if (v == NULL)
			preply_raw(r, "null", 4);
		else
			preply_string(r, v);
	}
}

void preply_bool(struct preply *r, const char *k, bool v)
{
	if (preply_key(r, k))
		preply_raw(r, v ? "true" : "false", v ? 4 : 5);
}

void preply_double(struct preply *r, const char *k, double v)
{
	char num[40];
	int n;

	if (!preply_key(r, k))
		return;
	n = snprintf(num, sizeof(num), "%.17g", v);
	if (n <= 0 || (size_t)n >= sizeof(num) || strpbrk(num, "ni") != NULL) /* nan, inf */
		preply_raw(r, "null", 4);
	else
		preply_raw(r, num, (size_t)n);
}

/* Open a nested object (array when arr) as member k of the current level. */
static void preply_open(struct preply *r, const char *k, bool arr)
{
	if (r == NULL)
		return;
	if (r->depth + 1 >= PREPLY_DEPTH) {
		r->failed = true;
		return;
	}
	if (!preply_key(r, k))
		return;
	preply_raw(r, arr ? "[" : "{", 1);
	r->depth++;
	r->first[r->depth] = true;
	r->array[r->depth] = arr;
}

void preply_push(struct preply *r, const char *k)
{
	preply_open(r, k, false);
}

void preply_list(struct preply *r, const char *k)
{
	preply_open(r, k, true);
}

void preply_item(struct preply *r)
{
	if (r != NULL && !r->array[r->depth])
		r->failed = true;
	else
		preply_open(r, NULL, false);
}

void preply_free(struct preply *r)
{
	if (r != NULL) {
		free(r->buf);
		free(r);
	}
}

void preply_pop(struct preply *r)
{
	if (r && r->depth > 0) {
		preply_raw(r, r->array[r->depth] ? "]" : "}", 1);
		r->depth--;
	}
}

char *preply_finish(struct preply *r, size_t *len)
{
	static const char oom[] =
	    "{\"ok\":false,\"error\":\"unavailable\",\"message\":\"out of memory\"}\n";
	char *line;

	while (r != NULL && r->depth > 0)
		preply_pop(r);
	if (r == NULL || r->failed || !preply_room(r, 2)) {
		preply_free(r);
		line = strdup(oom);
		*len = line ? sizeof(oom) - 1 : 0;
		return line;
	}
	r->buf[r->len++] = '}';
	r->buf[r->len++] = '\n';
	r->buf[r->len] = '\0';
	line = r->buf;
	*len = r->len;
	free(r);
	return line;
}
