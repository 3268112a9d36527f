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
	[OP_PING] = "ping",
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

static enum admit_err proto_int(json_t *o, const char *k, int64_t min, int64_t max, int64_t *dst,
				bool *has, char *msg, size_t msglen)
{
	json_t *v = json_object_get(o, k);

	if (has)
		*has = false;
	if (v == NULL || json_is_null(v))
		return ADMIT_OK;
	if (!json_is_integer(v))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" must be an integer", k);
	if (json_integer_value(v) < min || json_integer_value(v) > max)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" must be between %lld and %lld", k,
			   (long long)min, (long long)max);
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
	PROTO_TRY(proto_int(o, "cost", 0, PROTO_MAX_COST, &t->cost, NULL, msg, msglen));
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

/* "tokens" of a release, "reserve" of an acquire: meter name -> count. */
static enum admit_err proto_tokens(json_t *root, const char *field, struct proto_token *out,
				   size_t *nout, char *msg, size_t msglen)
{
	json_t *obj = json_object_get(root, field), *v;
	const char *k;

	if (obj == NULL || json_is_null(obj))
		return ADMIT_OK;
	if (!json_is_object(obj))
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"%s\" must be an object of counts", field);
	if (json_object_size(obj) > PROTO_MAX_TOKENS)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "at most %d token counts", PROTO_MAX_TOKENS);
	json_object_foreach (obj, k, v) {
		struct proto_token *t = &out[*nout];
		if (strlen(k) == 0 || strlen(k) > PROTO_NAME_MAX)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "bad token meter name");
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > PROTO_MAX_COST)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST,
				   "token count \"%s\" must be an integer 0..%lld", k,
				   PROTO_MAX_COST);
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

	PROTO_TRY(proto_int(root, "retry_after_ms", 0, PROTO_MAX_TIMEOUT_MS, &rq->penalty_ms,
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

static enum admit_err proto_decode_obj(json_t *root, struct request *rq, char *msg, size_t msglen)
{
	json_t *op = json_object_get(root, "op"), *id = json_object_get(root, "id");
	json_t *det;
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
		PROTO_TRY(proto_int(root, "timeout_ms", 0, PROTO_MAX_TIMEOUT_MS, &rq->timeout_ms,
				    &rq->has_timeout, msg, msglen));
		det = json_object_get(root, "detach");
		if (det != NULL && !json_is_null(det) && !json_is_boolean(det))
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"detach\" must be true or false");
		rq->detach = det != NULL && json_is_true(det);
		return proto_tokens(root, "reserve", rq->reserve, &rq->nreserve, msg, msglen);
	case OP_RELEASE:
		PROTO_TRY(proto_str(root, "lease", rq->lease, sizeof(rq->lease), &has_lease, msg,
				    msglen));
		if (!has_lease)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "\"lease\" is required");
		return proto_tokens(root, "tokens", rq->tokens, &rq->ntokens, msg, msglen);
	case OP_PENALIZE:
		PROTO_TRY(proto_targets(root, rq, msg, msglen));
		return proto_penalty(root, rq, msg, msglen);
	case OP_RESET:
	case OP_INSPECT:
		PROTO_TRY(proto_targets(root, rq, msg, msglen));
		if (rq->ntargets != 1)
			PROTO_FAIL(ADMIT_E_BAD_REQUEST, "one scope and key");
		return ADMIT_OK;
	case OP_STATUS:
	case OP_PING: return ADMIT_OK;
	default: PROTO_FAIL(ADMIT_E_UNKNOWN_OP, "unknown op \"%.64s\"", json_string_value(op));
	}
}

enum admit_err proto_decode(const char *line, size_t len, struct request *rq, char *msg,
			    size_t msglen)
{
	json_error_t jerr;
	json_t *root;
	enum admit_err e;

	memset(rq, 0, sizeof(*rq));
	rq->op = -1;
	root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL)
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "invalid JSON: %s", jerr.text);
	if (!json_is_object(root)) {
		json_decref(root);
		PROTO_FAIL(ADMIT_E_BAD_REQUEST, "a request must be a JSON object");
	}
	e = proto_decode_obj(root, rq, msg, msglen);
	json_decref(root);
	return e;
}

void proto_request_clear(struct request *rq)
{
	free(rq->id);
	rq->id = NULL;
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

#define PREPLY_DEPTH 4

struct preply {
	json_t *stack[PREPLY_DEPTH];
	int depth;
	bool failed; /* an allocation failed: finish emits a fixed error */
};

static void preply_set(struct preply *r, const char *k, json_t *v)
{
	if (v == NULL || !json_is_object(r->stack[r->depth]) ||
	    json_object_set_new(r->stack[r->depth], k, v) != 0) {
		json_decref(v);
		r->failed = true;
	}
}

struct preply *preply_new(const char *id_json, bool ok)
{
	struct preply *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->stack[0] = json_object();
	if (r->stack[0] == NULL) {
		free(r);
		return NULL;
	}
	preply_set(r, "ok", json_boolean(ok));
	if (id_json != NULL)
		preply_set(r, "id", json_loads(id_json, JSON_DECODE_ANY, NULL));
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
	if (r)
		preply_set(r, k, json_integer(v));
}

/*
 * A JSON string for v. Text that is not valid UTF-8 (a message quoting
 * client bytes cut at a length limit, say) is sent with every non-ASCII byte
 * as '?', rather than losing the whole reply.
 */
static json_t *preply_text(const char *v)
{
	json_t *j = json_string(v);
	char *copy, *p;

	if (j != NULL || v == NULL || (copy = strdup(v)) == NULL)
		return j;
	for (p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = json_string(copy);
	free(copy);
	return j;
}

void preply_str(struct preply *r, const char *k, const char *v)
{
	if (r)
		preply_set(r, k, preply_text(v));
}

void preply_bool(struct preply *r, const char *k, bool v)
{
	if (r)
		preply_set(r, k, json_boolean(v));
}

void preply_double(struct preply *r, const char *k, double v)
{
	if (r)
		preply_set(r, k, json_real(v));
}

void preply_push(struct preply *r, const char *k)
{
	json_t *o;

	if (r == NULL)
		return;
	if (r->depth + 1 >= PREPLY_DEPTH) {
		r->failed = true;
		return;
	}
	o = json_object();
	if (o == NULL || json_object_set_new(r->stack[r->depth], k, o) != 0) {
		r->failed = true;
		return;
	}
	r->stack[++r->depth] = o; /* borrowed: the parent owns it */
}

void preply_list(struct preply *r, const char *k)
{
	json_t *a;

	if (r == NULL)
		return;
	if (r->depth + 1 >= PREPLY_DEPTH) {
		r->failed = true;
		return;
	}
	a = json_array();
	if (a == NULL || json_object_set_new(r->stack[r->depth], k, a) != 0) {
		r->failed = true;
		return;
	}
	r->stack[++r->depth] = a;
}

void preply_item(struct preply *r)
{
	json_t *o;

	if (r == NULL)
		return;
	if (r->depth + 1 >= PREPLY_DEPTH || !json_is_array(r->stack[r->depth])) {
		r->failed = true;
		return;
	}
	o = json_object();
	if (o == NULL || json_array_append_new(r->stack[r->depth], o) != 0) {
		r->failed = true;
		return;
	}
	r->stack[++r->depth] = o;
}

void preply_free(struct preply *r)
{
	if (r != NULL) {
		json_decref(r->stack[0]);
		free(r);
	}
}

void preply_pop(struct preply *r)
{
	if (r && r->depth > 0)
		r->depth--;
}

char *preply_finish(struct preply *r, size_t *len)
{
	static const char oom[] =
	    "{\"ok\":false,\"error\":\"unavailable\",\"message\":\"out of memory\"}\n";
	char *s = NULL, *line;
	size_t n;

	if (r != NULL && !r->failed)
		s = json_dumps(r->stack[0], JSON_COMPACT);
	if (r != NULL) {
		json_decref(r->stack[0]);
		free(r);
	}
	if (s == NULL) {
		line = strdup(oom);
		*len = line ? sizeof(oom) - 1 : 0;
		return line;
	}
	n = strlen(s);
	line = realloc(s, n + 2);
	if (line == NULL) {
		free(s);
		line = strdup(oom);
		*len = line ? sizeof(oom) - 1 : 0;
		return line;
	}
	line[n] = '\n';
	line[n + 1] = '\0';
	*len = n + 1;
	return line;
}
