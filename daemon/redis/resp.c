/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * resp.c - the Redis wire codec over hiredis 0.14.1 (see resp.h).
 *
 * Owns: the hiredis reader and every redisReply it builds (each is turned
 * into an owned struct rval and freed at once), and the formatter's
 * buffers. The only file of the daemon that includes hiredis, so a move to
 * another hiredis (or to our own reader) touches this file alone.
 */

#include "resp.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct resp_reader {
	redisReader *r;
};

static void rval_clear(struct rval *v)
{
	for (size_t i = 0; i < v->n; i++)
		rval_clear(&v->a[i]);
	free(v->a);
	free(v->s);
}

void rval_free(struct rval *v)
{
	if (v == NULL)
		return;
	rval_clear(v);
	free(v);
}

/* Deep copy of src into *dst (zeroed by the caller); false on OOM. */
static bool rval_dup(struct rval *dst, const struct rval *src)
{
	dst->type = src->type;
	dst->i = src->i;
	if (src->s != NULL) {
		dst->s = malloc(src->len + 1);
		if (dst->s == NULL)
			return false;
		memcpy(dst->s, src->s, src->len + 1);
		dst->len = src->len;
	}
	if (src->n > 0) {
		dst->a = calloc(src->n, sizeof(*dst->a));
		if (dst->a == NULL)
			return false;
		dst->n = src->n;
		for (size_t i = 0; i < src->n; i++)
			if (!rval_dup(&dst->a[i], &src->a[i]))
				return false;
	}
	return true;
}

struct rval *rval_copy(const struct rval *v)
{
	struct rval *c = calloc(1, sizeof(*c));

	if (c != NULL && !rval_dup(c, v)) {
		rval_free(c);
		c = NULL;
	}
	return c;
}

bool rval_is_err(const struct rval *v, const char *word)
{
	size_t n = strlen(word);

	return v != NULL && v->type == RV_ERR && v->len >= n && memcmp(v->s, word, n) == 0 &&
	       (v->len == n || v->s[n] == ' ');
}

/* Deep copy of r into *v (zeroed by the caller); false on OOM. */
static bool rval_fill(struct rval *v, const redisReply *r)
{
	switch (r->type) {
	case REDIS_REPLY_INTEGER:
		v->type = RV_INT;
		v->i = r->integer;
		return true;
	case REDIS_REPLY_NIL: v->type = RV_NIL; return true;
	case REDIS_REPLY_ARRAY:
		v->type = RV_ARR;
		if (r->elements == 0)
			return true;
		v->a = calloc(r->elements, sizeof(*v->a));
		if (v->a == NULL)
			return false;
		v->n = r->elements;
		for (size_t i = 0; i < r->elements; i++)
			if (!rval_fill(&v->a[i], r->element[i]))
				return false;
		return true;
	case REDIS_REPLY_STATUS: v->type = RV_STATUS; break;
	case REDIS_REPLY_ERROR: v->type = RV_ERR; break;
	default: /* REDIS_REPLY_STRING, and anything newer read as bytes */ v->type = RV_STR; break;
	}
	v->s = malloc(r->len + 1);
	if (v->s == NULL)
		return false;
	if (r->len > 0)
		memcpy(v->s, r->str, r->len);
	v->s[r->len] = '\0';
	v->len = r->len;
	return true;
}

struct resp_reader *resp_reader_new(void)
{
	struct resp_reader *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->r = redisReaderCreate();
	if (r->r == NULL) {
		free(r);
		return NULL;
	}
	return r;
}

void resp_reader_free(struct resp_reader *r)
{
	if (r == NULL)
		return;
	redisReaderFree(r->r);
	free(r);
}

int resp_feed(struct resp_reader *r, const char *buf, size_t len)
{
	return redisReaderFeed(r->r, buf, len) == REDIS_OK ? 0 : -1;
}

int resp_next(struct resp_reader *r, struct rval **out)
{
	void *reply = NULL;
	struct rval *v;

	*out = NULL;
	if (redisReaderGetReply(r->r, &reply) != REDIS_OK)
		return -1;
	if (reply == NULL)
		return 0;
	v = calloc(1, sizeof(*v));
	if (v != NULL && !rval_fill(v, reply)) {
		rval_free(v);
		v = NULL;
	}
	freeReplyObject(reply);
	if (v == NULL)
		return -1;
	*out = v;
	return 1;
}

int resp_format(int argc, const char *const *argv, const size_t *lens, char **out, size_t *outlen)
{
	char *cmd = NULL;
	size_t *tmp = NULL;
	int n;

	if (argc <= 0)
		return -1;
	if (lens == NULL) {
		tmp = malloc((size_t)argc * sizeof(*tmp));
		if (tmp == NULL)
			return -1;
		for (int i = 0; i < argc; i++)
			tmp[i] = strlen(argv[i]);
		lens = tmp;
	}
	n = redisFormatCommandArgv(&cmd, argc, (const char **)argv, lens);
	free(tmp);
	if (n < 0 || cmd == NULL)
		return -1;
	*out = cmd;
	*outlen = (size_t)n;
	return 0;
}

void resp_free_cmd(char *cmd)
{
	redisFreeCommand(cmd);
}
