/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * resp.h - the Redis wire codec: commands to bytes, bytes to replies.
 *
 * Owns: a streaming reply reader and the command formatter. It never
 * touches a socket: the connection feeds it the bytes it read and takes the
 * bytes it should write. The only user of hiredis in the daemon (its reader
 * is what it does best; the formatter is our own, byte for byte what
 * hiredis's makes; its async layer is not used).
 */

#ifndef ADMITD_RESP_H
#define ADMITD_RESP_H

#include <stdbool.h>
#include <stddef.h>

enum rval_type { RV_NIL = 0, RV_INT, RV_STR, RV_STATUS, RV_ERR, RV_ARR };

/* An owned copy of a Redis reply (rpool's callers see it only during their callback). */
struct rval {
	enum rval_type type;
	long long i; /* RV_INT */
	char *s;     /* RV_STR, RV_STATUS, RV_ERR: NUL-terminated */
	size_t len;
	size_t n; /* RV_ARR */
	struct rval *a;
};

struct resp_reader;

/*
 * Bounds on one reply, past which it is a protocol error (resp_next -1):
 * what no reply of ours comes near, so a hostile or broken server cannot
 * make the reader allocate without bound. The largest reply we read is
 * CLUSTER SLOTS of a map of 16384 single-slot ranges: 16384 entries of 18
 * values and about 250 bytes each with two replicas a master (4 MB; the
 * bounds leave room for a dozen nodes a range). A value is 48 bytes in
 * memory, so RESP_MAX_VALUES is 48 MiB at most, per connection.
 */
#define RESP_MAX_ARRAY	65536	      /* elements of one array */
#define RESP_MAX_VALUES (1024 * 1024) /* values in one reply, nested ones included */
#define RESP_MAX_BYTES	(32 << 20)    /* bytes of one reply on the wire */

/* resp_reader_new - a reader with nothing buffered, or NULL on OOM. */
struct resp_reader *resp_reader_new(void);
void resp_reader_free(struct resp_reader *r);

/* resp_feed - append len bytes read from the server. -1 on OOM. */
int resp_feed(struct resp_reader *r, const char *buf, size_t len);

/*
 * resp_next - the next complete reply: 1 with *out set (the caller owns
 * it: rval_free), 0 when more bytes are needed, -1 on a protocol error,
 * a reply past a bound above, or OOM (the stream is unusable: close the
 * connection; resp_error says why).
 */
int resp_next(struct resp_reader *r, struct rval **out);

/* resp_error - why resp_next last returned -1 (static or in r; no secrets). */
const char *resp_error(const struct resp_reader *r);

/*
 * resp_format - argv (binary-safe, lens may be NULL for C strings) as one
 * RESP command in a malloc'd buffer *out of *outlen bytes. -1 on OOM.
 */
int resp_format(int argc, const char *const *argv, const size_t *lens, char **out, size_t *outlen);

/* resp_free_cmd - free a buffer made by resp_format. */
void resp_free_cmd(char *cmd);

/* rval_free - free an owned reply (NULL is fine). */
void rval_free(struct rval *v);

/* rval_copy - a deep copy of v, or NULL on OOM. */
struct rval *rval_copy(const struct rval *v);

/* rval_is_err - v is an error reply whose message starts with word. */
bool rval_is_err(const struct rval *v, const char *word);

#endif
