/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * conf_reload.c - what a reload does with each changed [admitd] key.
 *
 * Owns: comparing an [admitd] key of two confs by how its type stores it,
 * and, by the key's flags, applying it at once, remaking the Redis
 * connections with it, or keeping the running value of a key that needs a
 * restart (conf_reload_keys).
 */

#include "conf_int.h"

#include <stdlib.h>
#include <string.h>

/* Do two [admitd] values of key k differ? false for a type with no comparison. */
static bool conf_key_differs(const struct conf_key *k, const struct conf *a, const struct conf *b)
{
	switch (conf_types[k->type].store) {
	case CS_STRING: {
		const char *x = *FIELD(a, k, char *), *y = *FIELD(b, k, char *);
		return (x == NULL) != (y == NULL) || (x != NULL && strcmp(x, y) != 0);
	}
	case CS_INT: return *FIELD(a, k, int) != *FIELD(b, k, int);
	case CS_INT64: return *FIELD(a, k, int64_t) != *FIELD(b, k, int64_t);
	case CS_DOUBLE: return *FIELD(a, k, double) != *FIELD(b, k, double);
	case CS_BOOL: return *FIELD(a, k, bool) != *FIELD(b, k, bool);
	case CS_ENUM: return *FIELD(a, k, enum conf_fail_mode) != *FIELD(b, k, enum conf_fail_mode);
	case CS_OTHER: break;
	}
	return false;
}

/* Give nw the value old runs with (a key that needs a restart). */
static bool conf_key_keep(const struct conf_key *k, const struct conf *old, struct conf *nw)
{
	char **dst, *v = NULL;
	const char *src;

	switch (conf_types[k->type].store) {
	case CS_STRING:
		src = *FIELD(old, k, char *);
		dst = FIELD(nw, k, char *);
		if (src != NULL && (v = strdup(src)) == NULL)
			return false;
		free(*dst);
		*dst = v;
		return true;
	case CS_INT: *FIELD(nw, k, int) = *FIELD(old, k, int); return true;
	case CS_INT64: *FIELD(nw, k, int64_t) = *FIELD(old, k, int64_t); return true;
	case CS_DOUBLE: *FIELD(nw, k, double) = *FIELD(old, k, double); return true;
	case CS_BOOL: *FIELD(nw, k, bool) = *FIELD(old, k, bool); return true;
	case CS_ENUM:
		*FIELD(nw, k, enum conf_fail_mode) = *FIELD(old, k, enum conf_fail_mode);
		return true;
	case CS_OTHER: break;
	}
	return true;
}

bool conf_reload_keys(const struct conf *old, struct conf *nw, conf_change_cb *cb, void *arg)
{
	for (const struct conf_key *k = conf_admitd_keys; k->name != NULL; k++) {
		enum conf_change how = (k->flags & CONF_F_LIVE)	   ? CONF_CHANGE_LIVE
				       : (k->flags & CONF_F_REDIS) ? CONF_CHANGE_REDIS
								   : CONF_CHANGE_RESTART;

		if (!conf_key_differs(k, old, nw))
			continue;
		if (how == CONF_CHANGE_RESTART && !conf_key_keep(k, old, nw))
			return false;
		cb(arg, k->name, how);
	}
	return true;
}
