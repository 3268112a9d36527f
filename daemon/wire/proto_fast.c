/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * proto_fast.c - a hand-written decoder for the request lines that make up
 * nearly all traffic: flat acquire, release, ping and status objects.
 *
 * Owns nothing but rq->id, which it allocates as the general decoder does.
 * It accepts a strict subset of JSON: one object whose members are known
 * request fields, each at most once, with values that are strings of
 * printable ASCII without escapes, integers 0..10^15 without fraction or
 * exponent, true or false; and of requests, only those that are valid in
 * every field. Anything else (an escape, a byte outside printable ASCII, a
 * nested value, null, an unknown or repeated member, a field out of range,
 * another op) it leaves to the general decoder in proto.c, which then
 * decodes the line or words its error. Where this decoder answers, the
 * general one gives the same request: tests/unit/wire/check_proto_fast.c and the
 * fuzzer decode every input both ways and compare.
 */

#include "proto.h"

#include "adaptive.h"

#include <stdlib.h>
#include <string.h>

enum pf_field {
	PF_OP = 0,
	PF_ID,
	PF_SCOPE,
	PF_KEY,
	PF_CLASS,
	PF_COST,
	PF_TIMEOUT,
	PF_DETACH,
	PF_LEASE,
	PF_OUTCOME,
	PF__COUNT
};

static const struct {
	const char *name;
	size_t len;
} pf_names[PF__COUNT] = {
	[PF_OP] = { "op", 2 },
	[PF_ID] = { "id", 2 },
	[PF_SCOPE] = { "scope", 5 },
	[PF_KEY] = { "key", 3 },
	[PF_CLASS] = { "class", 5 },
	[PF_COST] = { "cost", 4 },
	[PF_TIMEOUT] = { "timeout_ms", 10 },
	[PF_DETACH] = { "detach", 6 },
	[PF_LEASE] = { "lease", 5 },
	[PF_OUTCOME] = { "outcome", 7 },
};

enum pf_kind { PF_NONE = 0, PF_STR, PF_INT, PF_BOOL };

struct pf_val {
	enum pf_kind kind;
	const char *p; /* PF_STR: the string's bytes; PF_INT: the digits */
	size_t n;
	int64_t i; /* PF_INT; PF_BOOL: 0 or 1 */
};

#define PF_MAX_DIGITS 15 /* far below int64 overflow, above every limit */

static const char *pf_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	return p;
}

/* A string at p (its opening quote): printable ASCII, no escapes. */
static const char *pf_string(const char *p, const char *end, const char **s, size_t *n)
{
	const char *q = ++p;

	/* a string of the subset stops at its closing quote, or at a byte it may
	 * not hold (a control, DEL, non-ASCII, a backslash) */
	while (q < end && proto_json_plain[(unsigned char)*q])
		q++;
	if (q >= end || *q != '"')
		return NULL;
	*s = p;
	*n = (size_t)(q - p);
	return q + 1;
}

static const char *pf_value(const char *p, const char *end, struct pf_val *v)
{
	if (p >= end)
		return NULL;
	if (*p == '"') {
		v->kind = PF_STR;
		return pf_string(p, end, &v->p, &v->n);
	}
	if (*p >= '0' && *p <= '9') {
		const char *q = p;
		int64_t x = 0;
		while (q < end && *q >= '0' && *q <= '9' && q - p < PF_MAX_DIGITS + 1)
			x = x * 10 + (*q++ - '0');
		if (q - p > PF_MAX_DIGITS || (*p == '0' && q - p > 1))
			return NULL;
		if (q < end && (*q == '.' || *q == 'e' || *q == 'E' || (*q >= '0' && *q <= '9')))
			return NULL;
		v->kind = PF_INT;
		v->p = p;
		v->n = (size_t)(q - p);
		v->i = x;
		return q;
	}
	if ((size_t)(end - p) >= 4 && memcmp(p, "true", 4) == 0) {
		v->kind = PF_BOOL;
		v->i = 1;
		return p + 4;
	}
	if ((size_t)(end - p) >= 5 && memcmp(p, "false", 5) == 0) {
		v->kind = PF_BOOL;
		v->i = 0;
		return p + 5;
	}
	return NULL;
}

static int pf_field_of(const char *k, size_t n)
{
	int f;

	/* the first letter tells the fields apart but for cost and class, op and outcome */
	switch (n > 0 ? k[0] : 0) {
	case 'o': f = n == 2 ? PF_OP : PF_OUTCOME; break;
	case 'i': f = PF_ID; break;
	case 's': f = PF_SCOPE; break;
	case 'k': f = PF_KEY; break;
	case 'c': f = n == 4 ? PF_COST : PF_CLASS; break;
	case 't': f = PF_TIMEOUT; break;
	case 'd': f = PF_DETACH; break;
	case 'l': f = PF_LEASE; break;
	default: return -1;
	}
	return pf_names[f].len == n && memcmp(pf_names[f].name, k, n) == 0 ? f : -1;
}

/* Parse the object into v[]; false when it is not of the subset. */
static bool pf_object(const char *p, const char *end, struct pf_val *v)
{
	p = pf_ws(p, end);
	if (p >= end || *p++ != '{')
		return false;
	p = pf_ws(p, end);
	if (p < end && *p == '}')
		return pf_ws(p + 1, end) == end;
	for (;;) {
		const char *k;
		size_t kn;
		int f;

		if (p >= end || *p != '"' || (p = pf_string(p, end, &k, &kn)) == NULL)
			return false;
		if ((f = pf_field_of(k, kn)) < 0 || v[f].kind != PF_NONE)
			return false;
		p = pf_ws(p, end);
		if (p >= end || *p++ != ':')
			return false;
		if ((p = pf_value(pf_ws(p, end), end, &v[f])) == NULL)
			return false;
		p = pf_ws(p, end);
		if (p < end && *p == ',') {
			p = pf_ws(p + 1, end);
			continue;
		}
		if (p < end && *p == '}')
			return pf_ws(p + 1, end) == end;
		return false;
	}
}

/* A string field the request uses: absent, or 1..cap-1 bytes. */
static bool pf_str_ok(const struct pf_val *v, size_t cap)
{
	return v->kind == PF_NONE || (v->kind == PF_STR && v->n > 0 && v->n < cap);
}

static bool pf_int_ok(const struct pf_val *v, int64_t max)
{
	return v->kind == PF_NONE || (v->kind == PF_INT && v->i <= max);
}

static void pf_copy(char *dst, const struct pf_val *v)
{
	memcpy(dst, v->p, v->n);
	dst[v->n] = '\0';
}

static int pf_op(const struct pf_val *v)
{
	static const struct {
		const char *name;
		size_t len;
		int op;
	} ops[] = { { "acquire", 7, OP_ACQUIRE },
		    { "release", 7, OP_RELEASE },
		    { "ping", 4, OP_PING },
		    { "status", 6, OP_STATUS } };

	if (v->kind != PF_STR)
		return -1;
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (ops[i].len == v->n && memcmp(ops[i].name, v->p, v->n) == 0)
			return ops[i].op;
	return -1;
}

/* A release's "outcome" (adapt_outcome_parse), or -1: the general decoder words the error. */
static int pf_outcome(const struct pf_val *v)
{
	char buf[8];

	if (v->kind != PF_STR || v->n >= sizeof(buf))
		return -1;
	pf_copy(buf, v);
	return adapt_outcome_parse(buf);
}

bool proto_fast_decode(const char *line, size_t len, struct request *rq)
{
	struct pf_val v[PF__COUNT] = { { 0 } };
	const struct pf_val *id = &v[PF_ID];
	int op;

	if (!pf_object(line, line + len, v) || (op = pf_op(&v[PF_OP])) < 0)
		return false;
	if (id->kind == PF_BOOL)
		return false;
	switch (op) {
	case OP_ACQUIRE:
		if (v[PF_SCOPE].kind == PF_NONE ||
		    !pf_str_ok(&v[PF_SCOPE], sizeof(rq->targets[0].scope)) ||
		    !pf_str_ok(&v[PF_KEY], sizeof(rq->targets[0].key)) ||
		    !pf_str_ok(&v[PF_CLASS], sizeof(rq->targets[0].cls)) ||
		    !pf_int_ok(&v[PF_COST], PROTO_MAX_COST) ||
		    !pf_int_ok(&v[PF_TIMEOUT], PROTO_MAX_TIMEOUT_MS) ||
		    (v[PF_DETACH].kind != PF_NONE && v[PF_DETACH].kind != PF_BOOL) ||
		    (v[PF_LEASE].kind != PF_NONE && v[PF_LEASE].kind != PF_BOOL) ||
		    (v[PF_DETACH].kind == PF_BOOL && v[PF_DETACH].i == 1 &&
		     v[PF_LEASE].kind == PF_BOOL && v[PF_LEASE].i == 0))
			return false;
		break;
	case OP_RELEASE:
		if (v[PF_LEASE].kind == PF_NONE || !pf_str_ok(&v[PF_LEASE], sizeof(rq->lease)) ||
		    (v[PF_OUTCOME].kind != PF_NONE && pf_outcome(&v[PF_OUTCOME]) < 0))
			return false;
		break;
	default: break;
	}
	if (id->kind != PF_NONE) {
		/* the raw text: a string's with its quotes, as the encoder would write it */
		size_t n = id->kind == PF_STR ? id->n + 2 : id->n;
		const char *from = id->kind == PF_STR ? id->p - 1 : id->p;
		if ((rq->id = malloc(n + 1)) == NULL)
			return false;
		memcpy(rq->id, from, n);
		rq->id[n] = '\0';
	}
	rq->op = op;
	if (op == OP_ACQUIRE) {
		struct proto_target *t = &rq->targets[0];
		rq->ntargets = 1;
		pf_copy(t->scope, &v[PF_SCOPE]);
		t->has_key = v[PF_KEY].kind == PF_STR;
		if (t->has_key)
			pf_copy(t->key, &v[PF_KEY]);
		else
			t->key[0] = '\0';
		t->has_cls = v[PF_CLASS].kind == PF_STR;
		if (t->has_cls)
			pf_copy(t->cls, &v[PF_CLASS]);
		else
			t->cls[0] = '\0';
		t->cost = v[PF_COST].kind == PF_INT ? v[PF_COST].i : 1;
		rq->has_timeout = v[PF_TIMEOUT].kind == PF_INT;
		rq->timeout_ms = rq->has_timeout ? v[PF_TIMEOUT].i : 0;
		rq->detach = v[PF_DETACH].kind == PF_BOOL && v[PF_DETACH].i == 1;
		rq->no_lease = v[PF_LEASE].kind == PF_BOOL && v[PF_LEASE].i == 0;
	} else if (op == OP_RELEASE) {
		pf_copy(rq->lease, &v[PF_LEASE]);
		rq->outcome =
		    v[PF_OUTCOME].kind == PF_NONE ? ADAPT_NONE : pf_outcome(&v[PF_OUTCOME]);
	}
	return true;
}
