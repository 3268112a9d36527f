/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * proto_reply.c - the protocol codec's reply builder (see proto/PROTOCOL.md).
 *
 * Owns: struct preply, which writes one reply line straight into a growing
 * buffer (members, nested objects and arrays, JSON string escaping with
 * UTF-8 checked), and the fixed error reply when an allocation fails.
 */

#include "proto.h"

#include "decimal.h"
#include "spares.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* 1 for the bytes a JSON string holds as they are: printable ASCII but '"'
 * and '\\' (so 0 for the NUL that ends a string). The decoder's fast path
 * stops at the others (proto_fast.c). */
const unsigned char proto_json_plain[256] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x00 */
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x10 */
	1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20 */
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x30 */
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x40 */
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50 */
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x60 */
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, /* 0x70 */
							/* 0x80 to 0xff: 0 */
};

/* How many bytes from s on need no escaping. */
static size_t preply_plain_len(const unsigned char *s)
{
	size_t n = 0;

	while (proto_json_plain[s[n]])
		n++;
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
	n = preply_plain_len(s);
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
	const unsigned char *s = (const unsigned char *)k;
	size_t n;

	if (r == NULL || r->failed)
		return false;
	/* The common member: a plain key, written with its comma, quotes and
	 * colon in one go. */
	if (!r->array[r->depth] && k != NULL && s[n = preply_plain_len(s)] == '\0') {
		if (!preply_room(r, n + 4))
			return false;
		if (!r->first[r->depth])
			r->buf[r->len++] = ',';
		r->first[r->depth] = false;
		r->buf[r->len++] = '"';
		memcpy(r->buf + r->len, k, n);
		r->len += n;
		r->buf[r->len++] = '"';
		r->buf[r->len++] = ':';
		return true;
	}
	if (!r->first[r->depth])
		preply_raw(r, ",", 1);
	r->first[r->depth] = false;
	if (!r->array[r->depth]) {
		preply_string(r, k);
		preply_raw(r, ":", 1);
	}
	return !r->failed;
}

/*
 * Spare builders: a reply's builder is handed back at finish, so the next
 * reply takes it instead of an allocation (two a request otherwise). The
 * daemon builds replies on its one loop thread; a few spares cover a loop
 * pass that holds several builders at once.
 */
static struct spares preply_spares = SPARES_INIT(struct preply, 8);

void preply_spares_free(void)
{
	spares_free(&preply_spares);
}

struct preply *preply_new(const char *id_json, bool ok)
{
	struct preply *r = spares_get(&preply_spares);

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
	char num[DEC_MAX], *p;

	if (!preply_key(r, k))
		return;
	p = dec_put_i64(num + sizeof(num), v);
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
		spares_put(&preply_spares, r);
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
	spares_put(&preply_spares, r);
	return line;
}
