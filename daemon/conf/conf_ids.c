/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_ids.c - the keys that name users and groups: allow_uids, allow_gids
 * and socket_group.
 *
 * Owns: resolving a user or group name to its id through NSS when the conf
 * is loaded (digits are taken as an id as is), and the setters of those
 * keys.
 */

#include "conf_int.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

/* Longest user or group name looked up, and the getpw/getgr buffer. */
#define CONF_ID_NAME_MAX 256
#define CONF_ID_BUF	 (64 * 1024)

/*
 * One user or group: digits are an id as is (it need not exist: a
 * container's uids often have no name), anything else a name looked up now
 * (NSS: /etc/passwd, /etc/group), so a typo fails at load, not at accept.
 */
static const char *conf_id_resolve(struct conf_ctx *x, bool group, const char *word, uint32_t *out)
{
	char *buf = NULL;
	const char *e = NULL;
	int64_t v;
	int rc;

	if (isdigit((unsigned char)*word)) {
		if (cv_int(word, &v) != NULL || v > 4294967294LL)
			return conf_fmt(x, "\"%.64s\" is not a %s id (0 to 4294967294)", word,
					group ? "group" : "user");
		*out = (uint32_t)v;
		return NULL;
	}
	if ((buf = malloc(CONF_ID_BUF)) == NULL)
		return "out of memory";
	if (group) {
		struct group gr, *res = NULL;
		rc = getgrnam_r(word, &gr, buf, CONF_ID_BUF, &res);
		if (res != NULL)
			*out = (uint32_t)gr.gr_gid;
		else
			e = rc != 0 ? conf_fmt(x, "cannot look up group \"%.64s\": %s", word,
					       strerror(rc))
				    : conf_fmt(x, "no group \"%.64s\"", word);
	} else {
		struct passwd pw, *res = NULL;
		rc = getpwnam_r(word, &pw, buf, CONF_ID_BUF, &res);
		if (res != NULL)
			*out = (uint32_t)pw.pw_uid;
		else
			e = rc != 0 ? conf_fmt(x, "cannot look up user \"%.64s\": %s", word,
					       strerror(rc))
				    : conf_fmt(x, "no user \"%.64s\"", word);
	}
	free(buf);
	return e;
}

/* CT_UIDS, CT_GIDS: "root 1000 app" -> ids; every word must resolve. */
const char *conf_set_ids(struct conf_ctx *x, const struct conf_key *k, void *base, const char *arg,
			 const char *val)
{
	struct conf_ids *f = FIELD(base, k, struct conf_ids), ids = { 0 };
	bool group = k->type == CT_GIDS;
	char word[CONF_ID_NAME_MAX];
	const char *p = val, *e = NULL;

	(void)arg;
	while (*p != '\0') {
		size_t len = strcspn(p, " \t");
		uint32_t *grown;

		if (len >= sizeof(word)) {
			e = "a name is too long";
			goto fail;
		}
		memcpy(word, p, len);
		word[len] = '\0';
		p += len;
		p += strspn(p, " \t");
		if ((grown = realloc(ids.ids, (ids.n + 1) * sizeof(*grown))) == NULL) {
			e = "out of memory";
			goto fail;
		}
		ids.ids = grown;
		if ((e = conf_id_resolve(x, group, word, &ids.ids[ids.n])) != NULL)
			goto fail;
		ids.n++;
	}
	if (ids.n == 0) {
		e = group ? "needs at least one group (leave the key out to allow any)"
			  : "needs at least one user (leave the key out to allow any)";
		goto fail;
	}
	free(f->ids);
	*f = ids;
	return NULL;
fail:
	free(ids.ids);
	return e;
}

/* CT_GROUP: one group name or gid. */
const char *conf_set_group(struct conf_ctx *x, const struct conf_key *k, void *base,
			   const char *arg, const char *val)
{
	uint32_t gid;
	const char *e;

	(void)arg;
	if (*val == '\0' || strpbrk(val, " \t") != NULL)
		return "must be one group name or gid";
	if ((e = conf_id_resolve(x, true, val, &gid)) != NULL)
		return e;
	*FIELD(base, k, int64_t) = gid;
	return NULL;
}
