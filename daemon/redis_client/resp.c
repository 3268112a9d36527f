/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * resp.c - the Redis wire codec over hiredis 0.14.1 (see resp.h).
 *
 * Owns: the hiredis reader and every redisReply it builds (each is turned
 * into an owned struct rval and freed at once), and the command formatter
 * (our own: the bytes hiredis's redisFormatCommandArgv makes, without its
 * sprintf per argument). The only file of the daemon that includes
 * hiredis, so a move to another hiredis (or to our own reader) touches
 * this file alone.
 */

#include "resp.h"

#include "decimal.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/*
 * The reader builds struct rval trees itself (hiredis's object functions),
 * so it can refuse, while a reply is read, what no reply of ours needs: a
 * hostile or broken server must not make us allocate without bound. hiredis
 * allocates an array as soon as its header is read, before its elements
 * arrive (`*2147483647` is 13 bytes), and buffers a bulk string whole; it
 * bounds nesting (7) but neither of those. A refusal is a protocol error:
 * the connection is dropped and its calls fail.
 */

struct resp_reader {
	redisReader *r;
	size_t values;	  /* in the reply being read: values allocated so far */
	size_t bytes;	  /* fed since the last complete reply (its bytes, at least) */
	const char *over; /* the bound the reply being read broke, or NULL */
	char why[160];
};

/* Where the value of task goes: its slot in the parent array, or a new root. */
static struct rval *rd_slot(const redisReadTask *task)
{
	if (task->parent != NULL) {
		struct rval *parent = task->parent->obj;
		return &parent->a[task->idx];
	}
	return calloc(1, sizeof(struct rval));
}

/* Count n more values against the bound; false (and the reason kept) when over. */
static bool rd_charge(struct resp_reader *rd, size_t n)
{
	if (n > RESP_MAX_VALUES - rd->values) {
		rd->over = "too many values in one reply";
		return false;
	}
	rd->values += n;
	return true;
}

static void *rd_string(const redisReadTask *task, char *str, size_t len)
{
	struct resp_reader *rd = task->privdata;
	struct rval *v;

	if (!rd_charge(rd, task->parent == NULL))
		return NULL;
	v = rd_slot(task);
	if (v == NULL)
		return NULL;
	v->type = task->type == REDIS_REPLY_STATUS  ? RV_STATUS
		  : task->type == REDIS_REPLY_ERROR ? RV_ERR
						    : RV_STR;
	v->s = malloc(len + 1);
	if (v->s == NULL) {
		if (task->parent == NULL)
			free(v);
		return NULL;
	}
	if (len > 0)
		memcpy(v->s, str, len);
	v->s[len] = '\0';
	v->len = len;
	return v;
}

static void *rd_array(const redisReadTask *task, int elements)
{
	struct resp_reader *rd = task->privdata;
	struct rval *v;

	if (elements > RESP_MAX_ARRAY) {
		rd->over = "array longer than any reply needs";
		return NULL;
	}
	if (!rd_charge(rd, (size_t)elements + (task->parent == NULL)))
		return NULL;
	v = rd_slot(task);
	if (v == NULL)
		return NULL;
	v->type = RV_ARR;
	if (elements > 0) {
		v->a = calloc((size_t)elements, sizeof(*v->a));
		if (v->a == NULL) {
			if (task->parent == NULL)
				free(v);
			return NULL;
		}
		v->n = (size_t)elements;
	}
	return v;
}

static void *rd_integer(const redisReadTask *task, long long value)
{
	struct resp_reader *rd = task->privdata;
	struct rval *v;

	if (!rd_charge(rd, task->parent == NULL))
		return NULL;
	v = rd_slot(task);
	if (v != NULL) {
		v->type = RV_INT;
		v->i = value;
	}
	return v;
}

static void *rd_nil(const redisReadTask *task)
{
	struct resp_reader *rd = task->privdata;
	struct rval *v;

	if (!rd_charge(rd, task->parent == NULL))
		return NULL;
	v = rd_slot(task);
	if (v != NULL)
		v->type = RV_NIL;
	return v;
}

/* hiredis frees only a root this way (a reply left unfinished by an error). */
static void rd_free(void *obj)
{
	rval_free(obj);
}

static redisReplyObjectFunctions rd_fns = {
	.createString = rd_string,
	.createArray = rd_array,
	.createInteger = rd_integer,
	.createNil = rd_nil,
	.freeObject = rd_free,
};

struct resp_reader *resp_reader_new(void)
{
	struct resp_reader *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->r = redisReaderCreateWithFunctions(&rd_fns);
	if (r->r == NULL) {
		free(r);
		return NULL;
	}
	r->r->privdata = r;
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
	if (redisReaderFeed(r->r, buf, len) != REDIS_OK)
		return -1;
	r->bytes += len;
	return 0;
}

int resp_next(struct resp_reader *r, struct rval **out)
{
	void *reply = NULL;

	*out = NULL;
	if (redisReaderGetReply(r->r, &reply) != REDIS_OK) {
		snprintf(r->why, sizeof(r->why), "%s",
			 r->over != NULL ? r->over : redisReaderGetError(r->r));
		return -1;
	}
	if (reply == NULL) {
		/* What is buffered is one unfinished reply (and its value
		 * count, one unfinished tree): refuse it past the bound. */
		if (r->bytes > RESP_MAX_BYTES) {
			snprintf(r->why, sizeof(r->why), "reply longer than %d MiB",
				 RESP_MAX_BYTES >> 20);
			return -1;
		}
		return 0;
	}
	/* The bytes still buffered belong to the replies after this one. */
	r->bytes = r->r->len - r->r->pos;
	r->values = 0;
	*out = reply;
	return 1;
}

const char *resp_error(const struct resp_reader *r)
{
	return r->why[0] != '\0' ? r->why : "protocol error";
}

/*
 * resp_put_head - write "<mark><v>\r\n" at p (nd the digits of v) and
 * return the byte after it: the digits written from the last one back,
 * the same bytes hiredis's sprintf("%zu") makes, at a tenth of its cost.
 */
static char *resp_put_head(char *p, char mark, size_t v, size_t nd)
{
	*p = mark;
	dec_put_u64(p + 1 + nd, v);
	p += 1 + nd;
	p[0] = '\r';
	p[1] = '\n';
	return p + 2;
}

int resp_format(int argc, const char *const *argv, const size_t *lens, char **out, size_t *outlen)
{
	size_t total, nd, len, i;
	char *cmd, *p;

	if (argc <= 0)
		return -1;
	/* The size first, so the command is one malloc of its exact size. */
	total = 1 + dec_len_u64((size_t)argc) + 2;
	for (i = 0; i < (size_t)argc; i++) {
		len = lens != NULL ? lens[i] : strlen(argv[i]);
		if (len > SIZE_MAX / 2 - total - 32)
			return -1;
		total += 1 + dec_len_u64(len) + 2 + len + 2;
	}
	cmd = malloc(total + 1);
	if (cmd == NULL)
		return -1;
	p = resp_put_head(cmd, '*', (size_t)argc, dec_len_u64((size_t)argc));
	for (i = 0; i < (size_t)argc; i++) {
		len = lens != NULL ? lens[i] : strlen(argv[i]);
		nd = dec_len_u64(len);
		p = resp_put_head(p, '$', len, nd);
		if (len > 0)
			memcpy(p, argv[i], len);
		p += len;
		p[0] = '\r';
		p[1] = '\n';
		p += 2;
	}
	*p = '\0';
	*out = cmd;
	*outlen = total;
	return 0;
}

void resp_free_cmd(char *cmd)
{
	free(cmd);
}
