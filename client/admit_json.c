/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * admit_json.c - libadmit's readers of one member of a reply object, which
 * the reply's reader, the result's accessors and the cancel path share.
 */

#include "admit_int.h"

#include <stdlib.h>
#include <string.h>

int64_t admit_json_int(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

char *admit_json_str(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}
