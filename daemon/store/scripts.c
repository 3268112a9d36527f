/*
 * admitd - per-pod admission control and rate limiting.
 */

/*
 * scripts.c - lookup of the embedded Lua scripts by name.
 */

#include "scripts.h"

#include <string.h>

int script_index(const char *name)
{
	size_t i;

	for (i = 0; i < script_count; i++)
		if (strcmp(script_names[i], name) == 0)
			return (int)i;
	return -1;
}
